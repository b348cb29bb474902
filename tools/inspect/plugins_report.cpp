#include "inspect/plugins_report.h"

#include <algorithm>
#include <cstdlib>
#include <map>

#include <fmt/format.h>

#include "core/log.h"
#include "core/plugin_loader.h"

namespace zenith::inspect {
namespace {

using BackendsByName = std::map<std::string, const Backend*>;

std::string loaded_line(const PluginCandidate& candidate, const BackendsByName& backends) {
  auto it = backends.find(candidate.name);
  auto version = it == backends.end() ? std::string() : fmt::format("  version {} ({})", it->second->version(),
                                                                      it->second->build_id());
  return fmt::format("loaded   {:<12} priority {:<4} {}  [{}]{}", candidate.name, candidate.priority, candidate.path,
                     candidate.source, version);
}

std::string skipped_line(const PluginCandidate& candidate) {
  auto name = candidate.name.empty() ? "-" : candidate.name;
  return fmt::format("skipped  {:<12} {:<13} {}  [{}]  reason: {}", name, "", candidate.path, candidate.source,
                     candidate.reason);
}

void write_search_order(const std::vector<std::string>& paths, std::ostream& out) {
  const char* env = std::getenv("ZENITH_PLUGIN_PATH");
  out << "search order:\n";
  for (const auto& path : paths) out << fmt::format("  --path {}\n", path);
  out << fmt::format("  ZENITH_PLUGIN_PATH={}\n", env != nullptr ? env : "(unset)");
  out << fmt::format("  the install folder: {}/zenith/plugins\n", libzenith_folder());
  out << fmt::format("  the folder of libzenith: {}\n", libzenith_folder());
}

}  // namespace

int write_plugins_report(const std::vector<std::string>& paths, std::ostream& out) {
  // Every skip is reported below with its reason; the loader's own warnings would say it twice.
  log::request(LogLevel::Error);
  BackendsByName backends;
  for (const auto* backend : discover_backends(paths)) backends[backend->name()] = backend;
  write_search_order(paths, out);
  auto candidates = plugin_candidates();
  out << "candidates:\n";
  for (const auto& candidate : candidates) {
    out << "  " << (candidate.loaded ? loaded_line(candidate, backends) : skipped_line(candidate)) << "\n";
  }
  auto loaded = std::count_if(candidates.begin(), candidates.end(), [](const auto& c) { return c.loaded; });
  out << fmt::format("{} candidates, {} loaded, {} skipped\n", candidates.size(), loaded,
                     static_cast<std::ptrdiff_t>(candidates.size()) - loaded);
  return static_cast<int>(backends.size());
}

}  // namespace zenith::inspect
