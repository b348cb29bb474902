// Kernel cache of the JIT CUDA backend: compiled kernels keyed by shape class.
//
// The key text comes from the code generator and holds everything that changes the generated
// code (canonical group, operand ranks and stride classes, reduction axes, index and vector width,
// target architecture, NVRTC version and options, code-generator version) and never a concrete
// size, so one compiled kernel serves every call of the same shape class. This layer treats the
// key as opaque bytes and compares it exactly.
//
// Level one is an in-memory map; level two is a folder on disk shared by every process of the
// user. This library depends on nothing but C++17, pthreads and OpenSSL's libcrypto (SHA-256), so
// it builds and tests without LibTorch or CUDA.
//
// ## Kernel cache files
//
// One file per key: `<folder>/<key_digest(key)>.zkc`. A writer writes the whole file under the
// private name `<folder>/<digest>.zkc.tmp.<pid>.<counter>` and renames it into place, so readers
// see either the old file or the new one, never a partial one, and several processes storing the
// same key all succeed (the last rename wins; their contents are equivalent by construction).
//
// Layout, all integers little-endian:
//
//   offset  size  field
//        0     4  magic "ZNKC"
//        4     4  uint32 format_version (kKernelCacheFormatVersion, currently 1)
//        8     8  uint64 key_size
//       16     8  uint64 name_size
//       24     8  uint64 kind_size
//       32     8  uint64 binary_size
//       40    32  SHA-256 of bytes [0, 40) followed by the whole payload
//       72        payload: key text, kernel name, binary kind, binary (sizes as above, no padding)
//
// The checksum covers the size fields as well as the payload: a checksum over the payload alone
// would accept a file whose boundary between two fields had moved (same bytes, different split).
//
// A file is loaded only if its size equals 72 plus the four sizes exactly (truncated or extended
// files are rejected, and no size is trusted before this check, so a corrupt size field cannot
// cause a huge allocation), the magic and version match, the checksum matches, and the stored key
// text equals the requested one byte for byte (a digest collision or a stale file is rejected).
// A rejected file counts in KernelCacheStats::rejected_files, is removed, and the lookup is a
// miss; the next store() writes a valid file in its place. Nothing here logs: callers read the
// statistics and report them (compile report, dump).
//
// Platform note: libtorch.so exports a broken std::filesystem::remove_all; this library may be
// linked into LibTorch programs, so it uses POSIX calls only.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace zenith::cuda {

inline constexpr std::uint32_t kKernelCacheFormatVersion = 1;

/// The canonical key text built by the code generator: any bytes, compared exactly.
struct KernelKey {
  std::string text;
};

/// Lowercase hex SHA-256 of the key text (64 characters): the cache file's name.
std::string key_digest(const KernelKey& key);

struct CachedKernel {
  std::string kernel_name;
  std::vector<char> binary;
  std::string binary_kind;  // "cubin" or "ptx"
};

struct KernelCacheStats {
  std::int64_t memory_hits = 0;
  std::int64_t disk_hits = 0;
  std::int64_t misses = 0;
  std::int64_t stores = 0;
  std::int64_t rejected_files = 0;  // corrupt, truncated or mismatched files, removed
  std::int64_t write_failures = 0;  // stores that reached memory but not the disk
};

/// Thread-safe: a plan's kernels are compiled by several threads that look up and store
/// concurrently. Disk reads and writes happen outside the lock.
class KernelCache {
 public:
  /// `folder` empty: memory only. The folder is created (mkdir -p, mode 0700) on the first store
  /// that needs it.
  explicit KernelCache(std::string folder);
  KernelCache(const KernelCache&) = delete;
  KernelCache& operator=(const KernelCache&) = delete;

  /// ZENITH_CACHE_DIR if set and non-empty; else $XDG_CACHE_HOME/zenith if XDG_CACHE_HOME is an
  /// absolute path (the XDG spec says to ignore relative ones); else $HOME/.cache/zenith; else
  /// empty (memory only).
  static std::string default_folder();

  /// Memory first, then disk; a valid file is kept in memory and counts as a disk hit.
  std::optional<CachedKernel> find(const KernelKey& key);

  /// Stores in memory, then on disk. Never throws for disk trouble: a failed write counts in
  /// write_failures and the kernel stays available from memory.
  void store(const KernelKey& key, const CachedKernel& kernel);

  KernelCacheStats stats() const;
  const std::string& folder() const { return folder_; }

 private:
  std::string file_path(const std::string& digest) const;

  const std::string folder_;
  mutable std::mutex mutex_;
  std::unordered_map<std::string, CachedKernel> memory_;
  KernelCacheStats stats_;
};

}  // namespace zenith::cuda
