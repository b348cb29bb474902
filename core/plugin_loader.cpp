#include "core/plugin_loader.h"

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>

#include "core/host_api.h"
#include "core/log.h"
#include "zenith/error.h"

namespace zenith {
namespace fs = std::filesystem;
namespace {

// What trying one file gave: the backend, or why there is none.
struct Outcome {
  const Backend* backend = nullptr;
  std::string reason;
};

struct LoaderState {
  std::mutex mutex;
  std::vector<PluginCandidate> candidates;
  std::map<std::string, Outcome> by_real_path;
  std::map<std::string, std::string> path_of_name;
  std::vector<std::unique_ptr<Backend>> backends;
};

LoaderState& state() {
  static auto* s = new LoaderState();  // never destroyed: plugins stay loaded until exit
  return *s;
}

bool is_plugin_file_name(const fs::path& path) {
  auto name = path.filename().string();
  return name.rfind("libzenith-backend-", 0) == 0 && path.extension() == ".so";
}

// Files to try for one search entry: the file itself, or the plugin files in a folder.
std::vector<std::string> expand(const std::string& entry) {
  std::error_code ec;
  if (fs::is_directory(entry, ec)) {
    std::vector<std::string> files;
    for (const auto& item : fs::directory_iterator(entry, ec)) {
      if (is_plugin_file_name(item.path())) files.push_back(item.path().string());
    }
    std::sort(files.begin(), files.end());
    return files;
  }
  return {entry};
}

std::vector<std::string> split_path_list(const char* text) {
  std::vector<std::string> entries;
  if (text == nullptr) return entries;
  std::string all(text);
  std::size_t start = 0;
  while (start <= all.size()) {
    auto end = all.find(':', start);
    if (end == std::string::npos) end = all.size();
    if (end > start) entries.push_back(all.substr(start, end - start));
    start = end + 1;
  }
  return entries;
}

// Reads and checks the table; returns the reason it is unusable, or empty.
std::string check_table(const zn_plugin_api* api) {
  if (api->struct_size < offsetof(zn_plugin_api, default_priority) + sizeof(api->default_priority)) {
    return fmt::format("its table is {} bytes, too short to hold even the header", api->struct_size);
  }
  if (api->abi_major != ZN_ABI_MAJOR) {
    return fmt::format("it speaks plugin ABI {}.{}, this Zenith needs major version {}; rebuild it against this "
                       "zenith/plugin.h",
                       api->abi_major, api->abi_minor, ZN_ABI_MAJOR);
  }
  if (api->name == nullptr || api->name[0] == '\0') return "its table has no name";
  const char* missing = !ZN_CAN_CALL(api, zn_plugin_api, init)             ? "init"
                        : !ZN_CAN_CALL(api, zn_plugin_api, shutdown)       ? "shutdown"
                        : !ZN_CAN_CALL(api, zn_plugin_api, query)          ? "query"
                        : !ZN_CAN_CALL(api, zn_plugin_api, compile)        ? "compile"
                        : !ZN_CAN_CALL(api, zn_plugin_api, launch)         ? "launch"
                        : !ZN_CAN_CALL(api, zn_plugin_api, kernel_release) ? "kernel_release"
                                                                           : nullptr;
  if (missing != nullptr) {
    return fmt::format("its table (struct_size {}) lacks the function '{}'", api->struct_size, missing);
  }
  return "";
}

// Why `real_path` must not be loaded into this process, or empty: only a regular file owned by
// this user or root, which not every user may write, runs its code here. (Group-writable files
// pass: a umask of 002 makes every build's plugins so.)
std::string file_refusal(const std::string& real_path) {
  struct stat info {};
  if (::stat(real_path.c_str(), &info) != 0) return "it cannot be read (stat failed)";
  if (!S_ISREG(info.st_mode)) return "it is not a regular file";
  if (info.st_uid != ::geteuid() && info.st_uid != 0) {
    return fmt::format("it is owned by user {}, neither this user ({}) nor root; another user's library would run "
                       "as this process",
                       info.st_uid, ::geteuid());
  }
  if ((info.st_mode & S_IWOTH) != 0) {
    return fmt::format("its mode {:o} lets every user write it; chmod o-w it", info.st_mode & 07777);
  }
  return "";
}

// Tries one file; fills `candidate` and returns the backend or null.
const Backend* load_one(LoaderState& s, PluginCandidate& candidate, const std::string& real_path) {
  if (auto why = file_refusal(real_path); !why.empty()) {
    candidate.reason = why;
    return nullptr;
  }
  void* library = dlopen(real_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* error = dlerror();
    candidate.reason = fmt::format("not a loadable shared library: {}", error ? error : "unknown error");
    return nullptr;
  }
  auto entry = reinterpret_cast<zn_plugin_get_api_fn>(dlsym(library, ZN_PLUGIN_ENTRY_SYMBOL));
  if (entry == nullptr) {
    candidate.reason = fmt::format("it does not export '{}': not a Zenith plugin", ZN_PLUGIN_ENTRY_SYMBOL);
    return nullptr;
  }
  const zn_plugin_api* api = nullptr;
  try {
    api = entry(host_api(), ZN_ABI_MAJOR, ZN_ABI_MINOR);
  } catch (...) {
    candidate.reason = "its entry point threw an exception across the C ABI";
    return nullptr;
  }
  if (api == nullptr) {
    candidate.reason = fmt::format("it declined host ABI {}.{} (its own log line says why)", ZN_ABI_MAJOR, ZN_ABI_MINOR);
    return nullptr;
  }
  // The name is part of the frozen prefix, readable even from a table that fails the checks.
  if (api->struct_size >= offsetof(zn_plugin_api, name) + sizeof(api->name) && api->name != nullptr) {
    candidate.name = api->name;
  }
  if (auto problem = check_table(api); !problem.empty()) {
    candidate.reason = problem;
    return nullptr;
  }
  if (auto it = s.path_of_name.find(candidate.name); it != s.path_of_name.end()) {
    candidate.reason = fmt::format("a plugin named '{}' is already loaded from {}", candidate.name, it->second);
    return nullptr;
  }
  void* context = nullptr;
  auto status = take_status(api->init("{}", &context));
  if (status.code != ZN_STATUS_OK) {
    candidate.reason = fmt::format("init failed: {}: {}", status_code_name(status.code), status.message);
    return nullptr;
  }
  s.backends.push_back(std::make_unique<Backend>(api, context, real_path));
  s.path_of_name[candidate.name] = real_path;
  candidate.loaded = true;
  candidate.priority = api->default_priority;
  return s.backends.back().get();
}

Outcome consider(LoaderState& s, const std::string& path, const std::string& source) {
  std::error_code ec;
  auto real = fs::weakly_canonical(path, ec).string();
  if (ec || !fs::exists(real, ec)) {
    PluginCandidate missing{path, source, false, "", 0, "no such file or folder"};
    log::warn("plugin candidate {} (from {}) skipped: {}", path, source, missing.reason);
    s.candidates.push_back(missing);
    return {nullptr, missing.reason};
  }
  // A file seen before, through this or another entry, is not tried again.
  if (auto it = s.by_real_path.find(real); it != s.by_real_path.end()) return it->second;
  PluginCandidate candidate{path, source, false, "", 0, ""};
  const Backend* backend = load_one(s, candidate, real);
  s.by_real_path[real] = Outcome{backend, candidate.reason};
  if (backend != nullptr) {
    log::debug("plugin '{}' {} loaded from {} (priority {})", backend->name(), backend->version(), real, backend->priority());
  } else if (candidate.reason.find("UNAVAILABLE") != std::string::npos) {
    log::info("plugin {} skipped: {}", path, candidate.reason);
  } else {
    log::warn("plugin {} (from {}) skipped: {}", path, source, candidate.reason);
  }
  s.candidates.push_back(std::move(candidate));
  return s.by_real_path[real];
}

void refuse_relative(LoaderState& s, const std::string& entry, const std::string& source) {
  if (std::any_of(s.candidates.begin(), s.candidates.end(),
                  [&](const PluginCandidate& c) { return c.path == entry && c.source == source; })) {
    return;  // reported once
  }
  PluginCandidate relative{entry, source, false, "", 0,
                           "a relative entry, which Zenith does not search (it would depend on the current "
                           "directory); give an absolute path"};
  log::warn("plugin candidate {} (from {}) skipped: {}", entry, source, relative.reason);
  s.candidates.push_back(relative);
}

}  // namespace

std::string libzenith_folder() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&libzenith_folder), &info) == 0 || info.dli_fname == nullptr) return "";
  std::error_code ec;
  return fs::weakly_canonical(info.dli_fname, ec).parent_path().string();
}

std::vector<const Backend*> discover_backends(const std::vector<std::string>& explicit_paths) {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  for (const auto& entry : explicit_paths)
    for (const auto& file : expand(entry)) consider(s, file, "explicit");
  for (const auto& entry : split_path_list(std::getenv("ZENITH_PLUGIN_PATH"))) {
    if (fs::path(entry).is_relative()) {
      // It would name a different file in every current directory.
      refuse_relative(s, entry, "ZENITH_PLUGIN_PATH");
      continue;
    }
    for (const auto& file : expand(entry)) consider(s, file, "ZENITH_PLUGIN_PATH");
  }
  // Installed, plugins live in <libdir>/zenith/plugins beside libzenith, wherever the prefix is;
  // in a build tree they sit next to libzenith itself.
  if (auto own = libzenith_folder(); !own.empty()) {
    std::error_code ec;
    auto install = (fs::path(own) / "zenith" / "plugins").string();
    if (fs::is_directory(install, ec))
      for (const auto& file : expand(install)) consider(s, file, "install folder");
    for (const auto& file : expand(own)) consider(s, file, "libzenith folder");
  }
  std::vector<const Backend*> usable;
  for (const auto& backend : s.backends) usable.push_back(backend.get());
  std::stable_sort(usable.begin(), usable.end(),
                   [](const Backend* a, const Backend* b) { return a->priority() > b->priority(); });
  return usable;
}

const Backend* load_backend(const std::string& path) {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  auto outcome = consider(s, path, "explicit");
  if (outcome.backend == nullptr) throw Error(fmt::format("plugin {} cannot be used: {}", path, outcome.reason));
  return outcome.backend;
}

std::vector<const Backend*> order_backends(const std::vector<const Backend*>& backends,
                                           const std::vector<std::string>& order) {
  if (order.empty()) return backends;
  std::vector<const Backend*> chosen;
  for (const auto& name : order) {
    auto it = std::find_if(backends.begin(), backends.end(), [&](const Backend* b) { return b->name() == name; });
    if (it == backends.end()) {
      std::string loaded;
      for (const auto* b : backends) loaded += (loaded.empty() ? "" : ", ") + b->name();
      log::warn("backend '{}' was asked for but is not loaded (loaded: {}); run zenith-inspect --plugins to see why",
                name, loaded.empty() ? "none" : loaded);
      continue;
    }
    chosen.push_back(*it);
  }
  return chosen;
}

std::vector<PluginCandidate> plugin_candidates() {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.candidates;
}

}  // namespace zenith
