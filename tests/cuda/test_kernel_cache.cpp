// Tests of the kernel cache (backends/cuda/kernel_cache.h): memory and disk levels, rejection of
// damaged files, concurrent writers (threads and processes), unwritable folders, default folder.
// Cleanup uses nftw and unlink/rmdir, never std::filesystem::remove_all (libtorch.so exports a
// broken one, and this test may one day be linked with LibTorch).
#include "backends/cuda/kernel_cache.h"

#include <gtest/gtest.h>
#include <openssl/evp.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace zenith::cuda {
namespace {

// The file layout from kernel_cache.h, restated so the tests can damage files on purpose.
constexpr std::size_t kVersionOffset = 4;
constexpr std::size_t kKeySizeOffset = 8;
constexpr std::size_t kNameSizeOffset = 16;
constexpr std::size_t kKindSizeOffset = 24;
constexpr std::size_t kBinarySizeOffset = 32;
constexpr std::size_t kChecksumOffset = 40;
constexpr std::size_t kHeaderSize = 72;

using Bytes = std::vector<char>;

// ---- files and folders -------------------------------------------------------------------------

int remove_entry(const char* path, const struct stat*, int, struct FTW*) {
  ::chmod(path, 0700);  // a test may have left a folder read-only
  return ::remove(path);
}

void remove_tree(const std::string& path) {
  ::chmod(path.c_str(), 0700);
  ::nftw(path.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

Bytes read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

std::vector<std::string> list_folder(const std::string& folder) {
  std::vector<std::string> names;
  if (DIR* dir = ::opendir(folder.c_str())) {
    while (const dirent* entry = ::readdir(dir))
      if (std::strcmp(entry->d_name, ".") != 0 && std::strcmp(entry->d_name, "..") != 0)
        names.emplace_back(entry->d_name);
    ::closedir(dir);
  }
  return names;
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// ---- header fields -----------------------------------------------------------------------------

void put_le(Bytes& bytes, std::size_t offset, std::uint64_t value, std::size_t width) {
  for (std::size_t i = 0; i < width; ++i) bytes[offset + i] = static_cast<char>(value >> (8 * i));
}

std::uint64_t get_le(const Bytes& bytes, std::size_t offset) {
  std::uint64_t value = 0;
  for (std::size_t i = 0; i < 8; ++i)
    value |= static_cast<std::uint64_t>(static_cast<unsigned char>(bytes[offset + i])) << (8 * i);
  return value;
}

// Recomputes the checksum after an edit, so a test reaches the check behind the checksum.
void reseal(Bytes& bytes) {
  unsigned char digest[32];
  unsigned int size = 0;
  EVP_MD_CTX* context = EVP_MD_CTX_new();
  EVP_DigestInit_ex(context, EVP_sha256(), nullptr);
  EVP_DigestUpdate(context, bytes.data(), kChecksumOffset);
  EVP_DigestUpdate(context, bytes.data() + kHeaderSize, bytes.size() - kHeaderSize);
  EVP_DigestFinal_ex(context, digest, &size);
  EVP_MD_CTX_free(context);
  std::memcpy(bytes.data() + kChecksumOffset, digest, sizeof digest);
}

// ---- kernels -----------------------------------------------------------------------------------

CachedKernel make_kernel(const std::string& name, std::size_t binary_size, char seed) {
  CachedKernel kernel;
  kernel.kernel_name = name;
  kernel.binary_kind = "cubin";
  for (std::size_t i = 0; i < binary_size; ++i) kernel.binary.push_back(static_cast<char>(static_cast<std::size_t>(seed) + i * 7));
  return kernel;
}

bool same(const CachedKernel& a, const CachedKernel& b) {
  return a.kernel_name == b.kernel_name && a.binary_kind == b.binary_kind && a.binary == b.binary;
}

// A key with bytes a text key would not have: the cache must treat keys as opaque.
KernelKey key_a() {
  std::string text = "group{add,mul;f32}";
  text.push_back('\0');
  return {text + "rank2;strides[c,1];sm_90\xff"};
}
KernelKey key_b() { return {"group{exp;f16};rank1;strides[1];sm_90"}; }

// ---- fixtures ----------------------------------------------------------------------------------

class KernelCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char name[] = "/tmp/zenith-kernel-cache-XXXXXX";
    ASSERT_NE(::mkdtemp(name), nullptr);
    folder_ = name;
  }
  void TearDown() override { remove_tree(folder_); }

  std::string path_of(const KernelKey& key) const { return folder_ + "/" + key_digest(key) + ".zkc"; }

  // Writes a valid file for key_a() through the cache and returns its bytes.
  Bytes stored_file() {
    KernelCache writer(folder_);
    writer.store(key_a(), make_kernel("zn_kernel_a", 300, 3));
    return read_bytes(path_of(key_a()));
  }

  std::string folder_;
};

// Replaces key_a()'s file with `bytes`, then checks the whole rejection contract: a miss counted
// in rejected_files, the file removed, and a later store() writing a file that loads again.
void expect_rejected_then_replaced(const std::string& folder, const std::string& path, const Bytes& bytes) {
  write_bytes(path, bytes);
  KernelCache reader(folder);
  EXPECT_FALSE(reader.find(key_a()).has_value());
  const KernelCacheStats stats = reader.stats();
  EXPECT_EQ(stats.rejected_files, 1);
  EXPECT_EQ(stats.misses, 1);
  EXPECT_EQ(stats.disk_hits, 0);
  EXPECT_FALSE(exists(path)) << "a rejected file must be removed";

  const CachedKernel fresh = make_kernel("zn_kernel_a2", 64, 9);
  reader.store(key_a(), fresh);
  KernelCache again(folder);
  const auto found = again.find(key_a());
  ASSERT_TRUE(found.has_value());
  EXPECT_TRUE(same(*found, fresh));
  EXPECT_EQ(again.stats().disk_hits, 1);
  EXPECT_EQ(again.stats().rejected_files, 0);
}

// ---- memory and disk levels --------------------------------------------------------------------

TEST_F(KernelCacheTest, StoreThenFindHitsMemoryThenDisk) {
  const CachedKernel kernel = make_kernel("zn_fused_add_mul", 1000, 1);
  KernelCache writer(folder_);
  writer.store(key_a(), kernel);
  auto found = writer.find(key_a());
  ASSERT_TRUE(found.has_value());
  EXPECT_TRUE(same(*found, kernel));
  EXPECT_EQ(writer.stats().memory_hits, 1);
  EXPECT_EQ(writer.stats().stores, 1);
  EXPECT_EQ(writer.stats().write_failures, 0);
  EXPECT_EQ(read_bytes(path_of(key_a())).size(), kHeaderSize + key_a().text.size() + 16 + 5 + 1000);

  KernelCache reader(folder_);
  found = reader.find(key_a());
  ASSERT_TRUE(found.has_value());
  EXPECT_TRUE(same(*found, kernel));
  found = reader.find(key_a());  // now from memory
  ASSERT_TRUE(found.has_value());
  const KernelCacheStats stats = reader.stats();
  EXPECT_EQ(stats.disk_hits, 1);
  EXPECT_EQ(stats.memory_hits, 1);
  EXPECT_EQ(stats.misses, 0);
  EXPECT_EQ(stats.rejected_files, 0);
}

TEST_F(KernelCacheTest, UnknownKeyIsAMiss) {
  KernelCache cache(folder_);
  cache.store(key_a(), make_kernel("a", 10, 1));
  EXPECT_FALSE(cache.find(key_b()).has_value());
  EXPECT_EQ(cache.stats().misses, 1);
  EXPECT_EQ(cache.stats().rejected_files, 0);
  KernelCache empty_folder(folder_ + "/never-created");
  EXPECT_FALSE(empty_folder.find(key_a()).has_value());
  EXPECT_EQ(empty_folder.stats().misses, 1);
}

TEST_F(KernelCacheTest, EmptyKernelFieldsRoundTrip) {
  CachedKernel kernel;  // empty name, kind and binary are legal sizes of zero
  KernelCache writer(folder_);
  writer.store(key_b(), kernel);
  KernelCache reader(folder_);
  const auto found = reader.find(key_b());
  ASSERT_TRUE(found.has_value());
  EXPECT_TRUE(same(*found, kernel));
}

TEST_F(KernelCacheTest, LaterStoreReplacesFile) {
  KernelCache writer(folder_);
  writer.store(key_a(), make_kernel("old", 50, 1));
  writer.store(key_a(), make_kernel("new", 70, 2));
  EXPECT_TRUE(same(*writer.find(key_a()), make_kernel("new", 70, 2)));
  KernelCache reader(folder_);
  EXPECT_TRUE(same(*reader.find(key_a()), make_kernel("new", 70, 2)));
}

TEST_F(KernelCacheTest, MemoryOnlyWritesNothing) {
  KernelCache cache("");
  EXPECT_EQ(cache.folder(), "");
  cache.store(key_a(), make_kernel("a", 10, 1));
  EXPECT_TRUE(cache.find(key_a()).has_value());
  EXPECT_FALSE(cache.find(key_b()).has_value());
  const KernelCacheStats stats = cache.stats();
  EXPECT_EQ(stats.memory_hits, 1);
  EXPECT_EQ(stats.misses, 1);
  EXPECT_EQ(stats.write_failures, 0);
}

TEST_F(KernelCacheTest, CreatesNestedFolderOnFirstStore) {
  const std::string nested = folder_ + "/a/b/c";
  KernelCache cache(nested);
  EXPECT_FALSE(exists(nested)) << "the folder is created lazily";
  cache.store(key_a(), make_kernel("a", 10, 1));
  EXPECT_EQ(cache.stats().write_failures, 0);
  struct stat st {};
  ASSERT_EQ(::stat(nested.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_TRUE(exists(nested + "/" + key_digest(key_a()) + ".zkc"));
}

// ---- damaged files -----------------------------------------------------------------------------

TEST_F(KernelCacheTest, TruncatedFilesAreRejected) {
  const Bytes valid = stored_file();
  const std::size_t key_end = kHeaderSize + key_a().text.size();
  for (std::size_t cut : {std::size_t{0}, std::size_t{3}, std::size_t{20}, kHeaderSize - 1, kHeaderSize,
                          kHeaderSize + 5, key_end + 4, valid.size() - 1}) {
    SCOPED_TRACE("cut at " + std::to_string(cut));
    expect_rejected_then_replaced(folder_, path_of(key_a()), Bytes(valid.begin(), valid.begin() + static_cast<std::ptrdiff_t>(cut)));
  }
}

TEST_F(KernelCacheTest, ExtendedFileIsRejected) {
  Bytes bytes = stored_file();
  bytes.push_back('x');
  expect_rejected_then_replaced(folder_, path_of(key_a()), bytes);
}

TEST_F(KernelCacheTest, FlippedByteIsRejected) {
  const Bytes valid = stored_file();
  const std::size_t key_end = kHeaderSize + key_a().text.size();
  // One byte in each payload field (key, name, kind, binary), and one in the stored checksum.
  for (std::size_t at : {kHeaderSize + 2, key_end + 1, key_end + 11 + 2, valid.size() - 10, kChecksumOffset + 5}) {
    SCOPED_TRACE("flip at " + std::to_string(at));
    Bytes bytes = valid;
    bytes[at] = static_cast<char>(bytes[at] ^ 0x01);
    expect_rejected_then_replaced(folder_, path_of(key_a()), bytes);
  }
}

TEST_F(KernelCacheTest, MovedFieldBoundaryIsRejected) {
  // Same bytes, one byte moved from the name to the kind (the key stays whole): only a checksum
  // over the sizes sees it.
  Bytes bytes = stored_file();
  put_le(bytes, kNameSizeOffset, get_le(bytes, kNameSizeOffset) - 1, 8);
  put_le(bytes, kKindSizeOffset, get_le(bytes, kKindSizeOffset) + 1, 8);
  expect_rejected_then_replaced(folder_, path_of(key_a()), bytes);
}

TEST_F(KernelCacheTest, BadMagicIsRejected) {
  Bytes bytes = stored_file();
  bytes[0] = 'X';
  reseal(bytes);
  expect_rejected_then_replaced(folder_, path_of(key_a()), bytes);
}

TEST_F(KernelCacheTest, OtherFormatVersionIsRejected) {
  Bytes bytes = stored_file();
  put_le(bytes, kVersionOffset, kKernelCacheFormatVersion + 1, 4);
  reseal(bytes);
  expect_rejected_then_replaced(folder_, path_of(key_a()), bytes);
}

TEST_F(KernelCacheTest, HugeSizeFieldIsRejectedWithoutAllocating) {
  const Bytes valid = stored_file();
  // 2^62 would exhaust memory if allocated; UINT64_MAX would overflow a naive sum of sizes.
  for (std::uint64_t huge : {std::uint64_t{1} << 62, ~std::uint64_t{0}}) {
    for (std::size_t field : {kKeySizeOffset, kBinarySizeOffset}) {
      SCOPED_TRACE("size " + std::to_string(huge) + " at offset " + std::to_string(field));
      Bytes bytes = valid;
      put_le(bytes, field, huge, 8);
      reseal(bytes);
      expect_rejected_then_replaced(folder_, path_of(key_a()), bytes);
    }
  }
}

TEST_F(KernelCacheTest, FileOfAnotherKeyIsRejected) {
  // A valid file for one key under another key's name: a digest collision or a stale file.
  const KernelKey same_length_key{std::string(key_a().text).replace(0, 5, "GROUP")};
  ASSERT_EQ(same_length_key.text.size(), key_a().text.size());
  for (const KernelKey& other : {key_b(), same_length_key}) {
    SCOPED_TRACE(other.text);
    KernelCache writer(folder_);
    writer.store(other, make_kernel("zn_other", 40, 5));
    ASSERT_EQ(::rename(path_of(other).c_str(), path_of(key_a()).c_str()), 0);
    expect_rejected_then_replaced(folder_, path_of(key_a()), read_bytes(path_of(key_a())));
  }
}

// ---- concurrency -------------------------------------------------------------------------------

// Every writer stores the shared key with its own contents, so a reader can tell a complete file
// from a mix of two; each also stores keys of its own.
constexpr int kWriterStores = 40;
constexpr int kOwnKeys = 8;
const KernelKey kSharedKey{"shared-group;rank3;strides[c,c,1]"};

CachedKernel writer_kernel(int writer, int round) {
  return make_kernel("zn_shared_w" + std::to_string(writer), 2000 + static_cast<std::size_t>(round % 5) * 1000,
                     static_cast<char>(writer * 31 + round));
}

KernelKey own_key(int writer, int index) {
  return {"own-w" + std::to_string(writer) + "-k" + std::to_string(index)};
}

CachedKernel own_kernel(int writer, int index) {
  return make_kernel("zn_own_" + std::to_string(index), 500, static_cast<char>(writer + index));
}

bool run_writer(const std::string& folder, int writer) {
  KernelCache cache(folder);
  for (int round = 0; round < kWriterStores; ++round) {
    cache.store(kSharedKey, writer_kernel(writer, round));
    if (round < kOwnKeys) cache.store(own_key(writer, round), own_kernel(writer, round));
  }
  return cache.stats().write_failures == 0;
}

bool is_some_writers_kernel(const CachedKernel& kernel, int writers) {
  for (int writer = 0; writer < writers; ++writer)
    for (int round = 0; round < kWriterStores; ++round)
      if (same(kernel, writer_kernel(writer, round))) return true;
  return false;
}

// Blocks the forked children until the parent's threads are running too, so they overlap.
void wait_for_start(int fd) {
  char go = 0;
  while (::read(fd, &go, 1) < 0 && errno == EINTR) {
  }
}

TEST_F(KernelCacheTest, ConcurrentWritersAcrossProcessesAndThreads) {
  constexpr int kProcesses = 3;
  constexpr int kThreads = 4;
  constexpr int kWriters = kProcesses + kThreads;
  int start[2];
  ASSERT_EQ(::pipe(start), 0);
  std::vector<pid_t> children;
  for (int p = 0; p < kProcesses; ++p) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(start[1]);
      wait_for_start(start[0]);
      ::_exit(run_writer(folder_, p) ? 0 : 1);
    }
    children.push_back(pid);
  }
  ::close(start[0]);

  std::atomic<bool> writing{true};
  std::atomic<int> torn_reads{0};
  std::vector<std::thread> threads;
  std::vector<int> thread_ok(static_cast<std::size_t>(kThreads), 0);
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] { thread_ok[static_cast<std::size_t>(t)] = run_writer(folder_, kProcesses + t) ? 1 : 0; });
  // A reader with fresh caches, so every lookup reads the disk: it must never see a partial file.
  std::thread reader([&] {
    while (writing) {
      KernelCache cache(folder_);
      const auto found = cache.find(kSharedKey);
      if (cache.stats().rejected_files != 0 || (found && !is_some_writers_kernel(*found, kWriters))) ++torn_reads;
    }
  });
  ::close(start[1]);  // releases the children

  for (std::thread& thread : threads) thread.join();
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "a child process failed to write";
  }
  writing = false;
  reader.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(thread_ok[static_cast<std::size_t>(t)], 1) << "thread " << t;
  EXPECT_EQ(torn_reads, 0);

  const std::vector<std::string> names = list_folder(folder_);
  EXPECT_EQ(names.size(), 1u + kWriters * kOwnKeys);
  for (const std::string& name : names) {
    EXPECT_TRUE(ends_with(name, ".zkc")) << name;
    EXPECT_EQ(name.find(".tmp"), std::string::npos) << "temporary file left behind: " << name;
  }
  KernelCache check(folder_);
  const auto shared = check.find(kSharedKey);
  ASSERT_TRUE(shared.has_value());
  EXPECT_TRUE(is_some_writers_kernel(*shared, kWriters));
  for (int writer = 0; writer < kWriters; ++writer)
    for (int index = 0; index < kOwnKeys; ++index) {
      const auto found = check.find(own_key(writer, index));
      ASSERT_TRUE(found.has_value()) << own_key(writer, index).text;
      EXPECT_TRUE(same(*found, own_kernel(writer, index)));
    }
  EXPECT_EQ(check.stats().rejected_files, 0);
  EXPECT_EQ(check.stats().disk_hits, 1 + kWriters * kOwnKeys);
}

TEST_F(KernelCacheTest, ConcurrentFindAndStoreInOneObject) {
  KernelCache cache(folder_);
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t)
    threads.emplace_back([&cache, t] {
      for (int i = 0; i < 50; ++i) {
        const KernelKey key{"k" + std::to_string(i % 10)};
        if (!cache.find(key)) cache.store(key, make_kernel("n" + std::to_string(i % 10), 100, static_cast<char>(t)));
      }
    });
  for (std::thread& thread : threads) thread.join();
  const KernelCacheStats stats = cache.stats();
  EXPECT_EQ(stats.memory_hits + stats.disk_hits + stats.misses, 6 * 50);
  EXPECT_EQ(stats.stores, stats.misses);
  EXPECT_EQ(stats.write_failures, 0);
  EXPECT_EQ(stats.rejected_files, 0);
  EXPECT_EQ(list_folder(folder_).size(), 10u);
}

// ---- unwritable folders ------------------------------------------------------------------------

void expect_memory_only(KernelCache& cache) {
  const CachedKernel kernel = make_kernel("zn_a", 100, 1);
  cache.store(key_a(), kernel);  // must not throw
  const auto found = cache.find(key_a());
  ASSERT_TRUE(found.has_value());
  EXPECT_TRUE(same(*found, kernel));
  EXPECT_EQ(cache.stats().write_failures, 1);
  EXPECT_EQ(cache.stats().stores, 1);
  EXPECT_EQ(cache.stats().memory_hits, 1);
}

TEST_F(KernelCacheTest, ReadOnlyFolderKeepsWorkingFromMemory) {
  ASSERT_EQ(::chmod(folder_.c_str(), 0500), 0);
  const std::string probe = folder_ + "/probe";
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT, 0600);
  if (fd >= 0) {
    ::close(fd);
    ::unlink(probe.c_str());
    GTEST_SKIP() << "chmod does not restrict this user (root?)";
  }
  KernelCache cache(folder_);
  expect_memory_only(cache);
  KernelCache nested(folder_ + "/sub");  // cannot be created either
  expect_memory_only(nested);
  EXPECT_TRUE(list_folder(folder_).empty());
}

TEST_F(KernelCacheTest, FolderUnderARegularFileKeepsWorkingFromMemory) {
  // Holds for root too: no permission bit lets mkdir go below a regular file.
  write_bytes(folder_ + "/plain-file", Bytes{'x'});
  KernelCache cache(folder_ + "/plain-file/cache");
  expect_memory_only(cache);
}

// ---- key digest --------------------------------------------------------------------------------

TEST(KeyDigest, StableHexSha256) {
  const std::string digest = key_digest(key_a());
  EXPECT_EQ(digest, key_digest(key_a()));
  EXPECT_EQ(digest.size(), 64u);
  EXPECT_EQ(digest.find_first_not_of("0123456789abcdef"), std::string::npos);
  KernelKey changed = key_a();
  changed.text.back() = static_cast<char>(changed.text.back() ^ 0x01);
  EXPECT_NE(key_digest(changed), digest);
  // The SHA-256 test vector, so the file names stay the same across builds and machines.
  EXPECT_EQ(key_digest(KernelKey{"abc"}), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(key_digest(KernelKey{""}), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

// ---- default folder ----------------------------------------------------------------------------

// Sets or unsets environment variables for one test and restores them afterwards.
class EnvGuard {
 public:
  explicit EnvGuard(std::vector<std::string> names) : names_(std::move(names)) {
    for (const std::string& name : names_) {
      const char* value = std::getenv(name.c_str());
      saved_.push_back(value ? std::optional<std::string>(value) : std::nullopt);
    }
  }
  ~EnvGuard() {
    for (std::size_t i = 0; i < names_.size(); ++i) set(names_[i], saved_[i]);
  }
  static void set(const std::string& name, const std::optional<std::string>& value) {
    if (value)
      ::setenv(name.c_str(), value->c_str(), 1);
    else
      ::unsetenv(name.c_str());
  }

 private:
  std::vector<std::string> names_;
  std::vector<std::optional<std::string>> saved_;
};

TEST(DefaultFolder, PrefersZenithCacheDirThenXdgThenHome) {
  EnvGuard guard({"ZENITH_CACHE_DIR", "XDG_CACHE_HOME", "HOME"});
  EnvGuard::set("ZENITH_CACHE_DIR", "/z/cache");
  EnvGuard::set("XDG_CACHE_HOME", "/x/cache");
  EnvGuard::set("HOME", "/h/user");
  EXPECT_EQ(KernelCache::default_folder(), "/z/cache");

  EnvGuard::set("ZENITH_CACHE_DIR", "");  // empty counts as unset
  EXPECT_EQ(KernelCache::default_folder(), "/x/cache/zenith");
  EnvGuard::set("ZENITH_CACHE_DIR", std::nullopt);
  EXPECT_EQ(KernelCache::default_folder(), "/x/cache/zenith");

  EnvGuard::set("XDG_CACHE_HOME", "relative/cache");  // the XDG spec says to ignore it
  EXPECT_EQ(KernelCache::default_folder(), "/h/user/.cache/zenith");
  EnvGuard::set("XDG_CACHE_HOME", std::nullopt);
  EXPECT_EQ(KernelCache::default_folder(), "/h/user/.cache/zenith");

  EnvGuard::set("HOME", std::nullopt);
  EXPECT_EQ(KernelCache::default_folder(), "");
}

}  // namespace
}  // namespace zenith::cuda
