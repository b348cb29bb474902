// Fuzzes the kernel cache's file reader (backends/cuda/kernel_cache.cpp): the input is written as
// the cache file of a fixed key, then looked up. A file that is not exactly what store() writes for
// that key must be rejected (a miss, counted, the file removed), never crash or be believed.
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "backends/cuda/kernel_cache.h"

namespace {

const zenith::cuda::KernelKey& key() {
  static const zenith::cuda::KernelKey key{"fuzz kernel key: group relu(add(x, y)), rank 2, sm_90"};
  return key;
}

// The folder of one process's cache, made once.
const std::string& folder() {
  static const std::string path = [] {
    std::string made = "/tmp/zenith-fuzz-cache-" + std::to_string(::getpid());
    ::mkdir(made.c_str(), 0700);
    return made;
  }();
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  zenith::cuda::KernelCache cache(folder());
  // The file name the header documents: the key's digest and ".zkc".
  const auto path = folder() + "/" + zenith::cuda::key_digest(key()) + ".zkc";
  if (std::FILE* file = std::fopen(path.c_str(), "wb")) {
    std::fwrite(data, 1, size, file);
    std::fclose(file);
  }
  auto found = cache.find(key());
  const auto stats = cache.stats();
  // Found, the file was whole and checked; else it was rejected and removed.
  if (found.has_value() != (stats.disk_hits == 1)) std::abort();
  if (!found && stats.rejected_files != 1) std::abort();
  if (!found && ::access(path.c_str(), F_OK) == 0) std::abort();
  return 0;
}
