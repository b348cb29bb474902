// A fresh kernel cache folder for a benchmark run, and the count of kernel files in it: NVRTC
// compiles are counted as new files, which no backend's report can misattribute.
#pragma once

#include <dirent.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace zenith::bench {

inline std::string make_fresh_folder(const std::string& prefix) {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/" + prefix + "-XXXXXX";
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  if (mkdtemp(buffer.data()) == nullptr) {
    std::fprintf(stderr, "cannot create a folder from %s: %s\n", pattern.c_str(), std::strerror(errno));
    std::exit(1);
  }
  return buffer.data();
}

inline std::vector<std::string> folder_entries(const std::string& folder) {
  std::vector<std::string> names;
  if (DIR* dir = opendir(folder.c_str())) {
    while (const dirent* entry = readdir(dir)) {
      std::string name = entry->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
    closedir(dir);
  }
  return names;
}

/// Kernel files, not a writer's temporary (".zkc.tmp.<pid>.<n>").
inline std::int64_t kernel_files(const std::string& folder) {
  std::int64_t count = 0;
  for (const auto& name : folder_entries(folder)) {
    if (name.size() > 4 && name.compare(name.size() - 4, 4, ".zkc") == 0) ++count;
  }
  return count;
}

/// A fresh folder, removed with its files when the run ends, also by an exception. POSIX calls
/// rather than std::filesystem::remove_all, which libtorch.so exports broken.
struct FreshFolder {
  explicit FreshFolder(const std::string& prefix) : path(make_fresh_folder(prefix)) {}
  FreshFolder(const FreshFolder&) = delete;
  FreshFolder& operator=(const FreshFolder&) = delete;
  ~FreshFolder() {
    for (const auto& name : folder_entries(path)) unlink((path + "/" + name).c_str());
    rmdir(path.c_str());
  }
  const std::string path;
};

}  // namespace zenith::bench
