// Finding, loading and checking backend plugins.
//
// Search order: explicit paths (CompileOptions::plugin_paths), ZENITH_PLUGIN_PATH (a colon list of
// files or folders), the install folder (zenith/plugins beside libzenith, i.e.
// <prefix>/lib/zenith/plugins), the folder of libzenith.
// Never the current directory: relative ZENITH_PLUGIN_PATH entries are reported and skipped. In
// folders, files named libzenith-backend-*.so are candidates. Only a regular file owned by this
// user or root, and not writable by every user, is loaded. A candidate that fails (that
// check, not a shared library, no entry symbol, another ABI major, a table too short, init
// failing) is logged with its reason and skipped; so is an entry that does not exist. A file seen twice (same real path)
// or a second plugin with a name already loaded is ignored. Plugins are never unloaded.
#pragma once

#include <string>
#include <vector>

#include "core/backend.h"

namespace zenith {

/// What happened to one candidate file.
struct PluginCandidate {
  std::string path;      ///< as found
  std::string source;    ///< "explicit", "ZENITH_PLUGIN_PATH", "install folder", "libzenith folder"
  bool loaded = false;   ///< initialized and usable
  std::string name;      ///< the plugin's name, when its table could be read
  int priority = 0;      ///< its default priority, when loaded
  std::string reason;    ///< why it was skipped
};

/// Loads what the search order finds (each file once per process) and returns every usable
/// backend, highest priority first.
std::vector<const Backend*> discover_backends(const std::vector<std::string>& explicit_paths);

/// Loads one plugin file (or returns it when already loaded); throws zenith::Error with the reason
/// when it cannot be used.
const Backend* load_backend(const std::string& path);

/// Keeps only the backends named in `order`, in that order; an empty `order` keeps all. A name
/// that matches no backend is logged as a warning.
std::vector<const Backend*> order_backends(const std::vector<const Backend*>& backends,
                                           const std::vector<std::string>& order);

/// Every candidate seen so far in this process, in the order found.
std::vector<PluginCandidate> plugin_candidates();

/// The folder libzenith was loaded from.
std::string libzenith_folder();

}  // namespace zenith
