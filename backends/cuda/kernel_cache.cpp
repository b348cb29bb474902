// Kernel cache: the file format and the rules for loading and writing are documented in
// kernel_cache.h ("Kernel cache files"). POSIX calls only: libtorch.so exports a broken
// std::filesystem::remove_all, and this library may be linked into LibTorch programs.
#include "backends/cuda/kernel_cache.h"

#include <openssl/evp.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <utility>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace zenith::cuda {
namespace {

constexpr char kMagic[4] = {'Z', 'N', 'K', 'C'};
constexpr std::size_t kSealedPrefixSize = 40;  // magic, version, four sizes: what the checksum covers
constexpr std::size_t kChecksumSize = 32;
constexpr std::size_t kHeaderSize = kSealedPrefixSize + kChecksumSize;
constexpr const char* kSuffix = ".zkc";

using Checksum = unsigned char[kChecksumSize];

// ---- SHA-256 ----------------------------------------------------------------------------------

// OpenSSL 3 deprecates the SHA256_* functions; EVP is the supported interface.
class Sha256 {
 public:
  Sha256() : context_(EVP_MD_CTX_new(), &EVP_MD_CTX_free) {
    if (!context_ || EVP_DigestInit_ex(context_.get(), EVP_sha256(), nullptr) != 1)
      throw std::runtime_error("zenith kernel cache: OpenSSL SHA-256 initialisation failed");
  }
  void update(const void* data, std::size_t size) {
    if (size > 0 && EVP_DigestUpdate(context_.get(), data, size) != 1)
      throw std::runtime_error("zenith kernel cache: OpenSSL SHA-256 update failed");
  }
  void finish(Checksum out) {
    unsigned int size = 0;
    if (EVP_DigestFinal_ex(context_.get(), out, &size) != 1 || size != kChecksumSize)
      throw std::runtime_error("zenith kernel cache: OpenSSL SHA-256 finalisation failed");
  }

 private:
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> context_;
};

// The checksum's input is the sealed prefix followed by the payload fields in file order.
void checksum_of(const unsigned char* prefix, const std::string& key, const CachedKernel& kernel,
                 Checksum out) {
  Sha256 sha;
  sha.update(prefix, kSealedPrefixSize);
  sha.update(key.data(), key.size());
  sha.update(kernel.kernel_name.data(), kernel.kernel_name.size());
  sha.update(kernel.binary_kind.data(), kernel.binary_kind.size());
  sha.update(kernel.binary.data(), kernel.binary.size());
  sha.finish(out);
}

// ---- little-endian header fields ---------------------------------------------------------------

// Written byte by byte so the format does not depend on the host's byte order.
void put_le(unsigned char* out, std::uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out[i] = static_cast<unsigned char>(value >> (8 * i));
}

std::uint64_t get_le(const unsigned char* in, int bytes) {
  std::uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) value |= static_cast<std::uint64_t>(in[i]) << (8 * i);
  return value;
}

struct Sizes {
  std::uint64_t key = 0, name = 0, kind = 0, binary = 0;
};

void encode_prefix(const Sizes& sizes, unsigned char* out) {
  std::memcpy(out, kMagic, sizeof kMagic);
  put_le(out + 4, kKernelCacheFormatVersion, 4);
  put_le(out + 8, sizes.key, 8);
  put_le(out + 16, sizes.name, 8);
  put_le(out + 24, sizes.kind, 8);
  put_le(out + 32, sizes.binary, 8);
}

// ---- POSIX helpers -----------------------------------------------------------------------------

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  // close() can report a deferred write error (NFS, full disk), so a writer must see its result.
  bool close() {
    const int fd = std::exchange(fd_, -1);
    return ::close(fd) == 0;
  }

 private:
  int fd_;
};

bool write_all(int fd, const void* data, std::size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

bool read_all(int fd, void* data, std::size_t size) {
  char* p = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t n = ::read(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// mkdir -p. Mode 0700 because the XDG base-directory spec asks for it, and because the cache holds
// code that will be loaded and run. A component that already exists is fine whatever mkdir says
// (EEXIST, or EACCES in a parent we may not write).
bool make_directories(const std::string& path) {
  for (std::size_t end = path.find('/', 1);; end = path.find('/', end + 1)) {
    const std::string prefix = path.substr(0, end);
    if (::mkdir(prefix.c_str(), 0700) != 0 && !is_directory(prefix)) return false;
    if (end == std::string::npos) return true;
  }
}

// ---- reading a cache file ----------------------------------------------------------------------

enum class LoadStatus { absent, rejected, valid };

struct Loaded {
  LoadStatus status = LoadStatus::absent;
  CachedKernel kernel;
};

// Checks the four sizes against the bytes actually present before anything is allocated.
bool sizes_fit(const Sizes& sizes, std::uint64_t file_size) {
  if (file_size < kHeaderSize) return false;
  std::uint64_t left = file_size - kHeaderSize;
  for (std::uint64_t size : {sizes.key, sizes.name, sizes.kind, sizes.binary}) {
    if (size > left) return false;
    left -= size;
  }
  return left == 0;
}

bool read_string(int fd, std::uint64_t size, std::string& out) {
  out.resize(static_cast<std::size_t>(size));
  return read_all(fd, out.data(), out.size());
}

// Reads and checks an open file; false means reject. The key size is compared before reading the
// key so that a file for another key of another length is rejected without reading its payload.
bool read_valid(int fd, std::uint64_t file_size, const std::string& key, CachedKernel& kernel) {
  unsigned char header[kHeaderSize];
  if (file_size < kHeaderSize || !read_all(fd, header, kHeaderSize)) return false;
  if (std::memcmp(header, kMagic, sizeof kMagic) != 0) return false;
  if (get_le(header + 4, 4) != kKernelCacheFormatVersion) return false;
  const Sizes sizes{get_le(header + 8, 8), get_le(header + 16, 8), get_le(header + 24, 8),
                    get_le(header + 32, 8)};
  if (!sizes_fit(sizes, file_size) || sizes.key != key.size()) return false;

  std::string stored_key;
  kernel.binary.resize(static_cast<std::size_t>(sizes.binary));
  if (!read_string(fd, sizes.key, stored_key) || !read_string(fd, sizes.name, kernel.kernel_name) ||
      !read_string(fd, sizes.kind, kernel.binary_kind) ||
      !read_all(fd, kernel.binary.data(), kernel.binary.size()))
    return false;

  Checksum expected;
  checksum_of(header, stored_key, kernel, expected);
  return std::memcmp(expected, header + kSealedPrefixSize, kChecksumSize) == 0 && stored_key == key;
}

// Removes a rejected file unless another process has renamed a fresh file into its place since we
// opened it: the name must still point at the inode we read.
void remove_if_unchanged(const std::string& path, const struct stat& opened) {
  struct stat now {};
  if (::stat(path.c_str(), &now) == 0 && now.st_dev == opened.st_dev && now.st_ino == opened.st_ino)
    ::unlink(path.c_str());
}

Loaded load_file(const std::string& path, const std::string& key) {
  Loaded loaded;
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  // A file we cannot open (absent, or unreadable) is a plain miss; store() will replace it.
  if (fd.get() < 0) return loaded;
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) return loaded;
  if (read_valid(fd.get(), static_cast<std::uint64_t>(st.st_size), key, loaded.kernel)) {
    loaded.status = LoadStatus::valid;
    return loaded;
  }
  loaded.status = LoadStatus::rejected;
  loaded.kernel = CachedKernel{};
  fd.close();
  remove_if_unchanged(path, st);
  return loaded;
}

// ---- writing a cache file ----------------------------------------------------------------------

// Unique per process (pid) and per store within it (counter), so concurrent writers of one key,
// threads or processes, never share a temporary file.
std::string temporary_path(const std::string& final_path) {
  static std::atomic<std::uint64_t> counter{0};
  return final_path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
}

bool write_contents(int fd, const std::string& key, const CachedKernel& kernel) {
  unsigned char header[kHeaderSize];
  encode_prefix({key.size(), kernel.kernel_name.size(), kernel.binary_kind.size(), kernel.binary.size()},
                header);
  checksum_of(header, key, kernel, header + kSealedPrefixSize);
  return write_all(fd, header, kHeaderSize) && write_all(fd, key.data(), key.size()) &&
         write_all(fd, kernel.kernel_name.data(), kernel.kernel_name.size()) &&
         write_all(fd, kernel.binary_kind.data(), kernel.binary_kind.size()) &&
         write_all(fd, kernel.binary.data(), kernel.binary.size());
}

int create_exclusive(const std::string& path) {
  return ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
}

// No fsync: after a crash a file may be empty or partial, and the loader rejects exactly that, so
// durability would only cost time on every compile.
bool write_file(const std::string& folder, const std::string& final_path, const std::string& key,
                const CachedKernel& kernel) {
  const std::string tmp = temporary_path(final_path);
  int raw = create_exclusive(tmp);
  // The folder is created lazily, and again if someone cleared the cache meanwhile.
  if (raw < 0 && errno == ENOENT && make_directories(folder)) raw = create_exclusive(tmp);
  if (raw < 0) return false;
  Fd fd(raw);
  bool ok = false;
  try {
    ok = write_contents(fd.get(), key, kernel);
  } catch (const std::exception&) {
    ok = false;
  }
  ok = fd.close() && ok;
  if (ok && ::rename(tmp.c_str(), final_path.c_str()) == 0) return true;
  ::unlink(tmp.c_str());
  return false;
}

std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

}  // namespace

std::string key_digest(const KernelKey& key) {
  Sha256 sha;
  sha.update(key.text.data(), key.text.size());
  Checksum digest;
  sha.finish(digest);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * kChecksumSize);
  for (unsigned char byte : digest) {
    hex.push_back(kHex[byte >> 4]);
    hex.push_back(kHex[byte & 0xf]);
  }
  return hex;
}

KernelCache::KernelCache(std::string folder) : folder_(std::move(folder)) {}

std::string KernelCache::default_folder() {
  if (std::string dir = env("ZENITH_CACHE_DIR"); !dir.empty()) return dir;
  if (std::string xdg = env("XDG_CACHE_HOME"); !xdg.empty() && xdg[0] == '/') return xdg + "/zenith";
  if (std::string home = env("HOME"); !home.empty()) return home + "/.cache/zenith";
  return "";
}

std::string KernelCache::file_path(const std::string& digest) const {
  return folder_ + "/" + digest + kSuffix;
}

std::optional<CachedKernel> KernelCache::find(const KernelKey& key) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = memory_.find(key.text); it != memory_.end()) {
      ++stats_.memory_hits;
      return it->second;
    }
  }
  Loaded loaded;
  if (!folder_.empty()) loaded = load_file(file_path(key_digest(key)), key.text);

  std::lock_guard<std::mutex> lock(mutex_);
  if (loaded.status == LoadStatus::valid) {
    ++stats_.disk_hits;
    // emplace, not assign: a store() that raced ahead of this load holds the newer kernel.
    return memory_.emplace(key.text, std::move(loaded.kernel)).first->second;
  }
  if (loaded.status == LoadStatus::rejected) ++stats_.rejected_files;
  ++stats_.misses;
  return std::nullopt;
}

void KernelCache::store(const KernelKey& key, const CachedKernel& kernel) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    memory_.insert_or_assign(key.text, kernel);
    ++stats_.stores;
  }
  if (folder_.empty()) return;
  bool written = false;
  try {
    written = write_file(folder_, file_path(key_digest(key)), key.text, kernel);
  } catch (const std::exception&) {
    written = false;  // the kernel is in memory; disk trouble must not fail the compile
  }
  if (!written) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.write_failures;
  }
}

KernelCacheStats KernelCache::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

}  // namespace zenith::cuda
