// Plugin loading: the CPU plugin loads from libzenith's folder, broken plugins are skipped with
// their reason, and compile keeps working when they are on the search path.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include <sys/stat.h>
#include <unistd.h>

#include <torch/torch.h>

#include "common/temp_folder.h"
#include "core/plugin_loader.h"
#include "zenith/compile.h"

namespace zenith {
namespace {

const PluginCandidate* find_candidate(const std::string& file_fragment) {
  static std::vector<PluginCandidate> candidates;
  candidates = plugin_candidates();
  for (const auto& c : candidates) {
    if (c.path.find(file_fragment) != std::string::npos) return &c;
  }
  return nullptr;
}

class PluginLoader : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { backends_ = discover_backends({ZENITH_TEST_PLUGIN_DIR, ZENITH_TEST_PLUGIN_DIR "/not-a-plugin.so"}); }
  void SetUp() override { torch::manual_seed(1); }
  static std::vector<const Backend*> backends_;
};
std::vector<const Backend*> PluginLoader::backends_;

TEST_F(PluginLoader, CpuPluginLoadsFromTheLibraryFolder) {
  auto it = std::find_if(backends_.begin(), backends_.end(), [](const Backend* b) { return b->name() == "cpu"; });
  ASSERT_NE(it, backends_.end());
  EXPECT_EQ((*it)->priority(), 100);
  const auto* candidate = find_candidate("libzenith-backend-cpu.so");
  ASSERT_NE(candidate, nullptr);
  EXPECT_EQ(candidate->source, "libzenith folder");
  EXPECT_TRUE(candidate->loaded);
}

struct BrokenCase {
  const char* file;
  const char* reason_fragment;
};

TEST_F(PluginLoader, BrokenPluginsAreSkippedWithTheirReason) {
  for (const auto& broken : {BrokenCase{"libzenith-backend-wrongmajor.so", "needs major version 1"},
                             BrokenCase{"libzenith-backend-noentry.so", "does not export 'zn_plugin_get_api'"},
                             BrokenCase{"libzenith-backend-initfails.so", "init failed: UNAVAILABLE: simulated"},
                             BrokenCase{"libzenith-backend-shorttable.so", "lacks the function 'init'"},
                             BrokenCase{"not-a-plugin.so", "not a loadable shared library"}}) {
    const auto* candidate = find_candidate(broken.file);
    ASSERT_NE(candidate, nullptr) << broken.file;
    EXPECT_FALSE(candidate->loaded) << broken.file;
    EXPECT_NE(candidate->reason.find(broken.reason_fragment), std::string::npos)
        << broken.file << ": " << candidate->reason;
  }
  for (const auto* backend : backends_) {
    EXPECT_TRUE(backend->name() == "cpu" || backend->name() == "torch_gpu" || backend->name() == "jit_cuda")
        << "only the default plugins may load here, not " << backend->name();
  }
}

TEST_F(PluginLoader, MissingPathsAndRepeatsAreHandled) {
  discover_backends({"/no/such/plugin.so", ZENITH_TEST_PLUGIN_DIR});
  const auto* missing = find_candidate("/no/such/plugin.so");
  ASSERT_NE(missing, nullptr);
  EXPECT_EQ(missing->reason, "no such file or folder");
  auto all = plugin_candidates();
  auto shorttable = std::count_if(all.begin(), all.end(), [](const PluginCandidate& c) {
    return c.path.find("shorttable") != std::string::npos;
  });
  EXPECT_EQ(shorttable, 1) << "a file seen twice is considered once";
  EXPECT_THROW(load_backend(ZENITH_TEST_PLUGIN_DIR "/libzenith-backend-wrongmajor.so"), Error);
}

// Only a regular file owned by this user or root, not writable by every user, is loaded; relative
// ZENITH_PLUGIN_PATH entries (the current directory's files) are reported and skipped.
TEST_F(PluginLoader, UnsafeFilesAndRelativeEntriesAreRefused) {
  namespace fs = std::filesystem;
  const auto folder = fs::temp_directory_path() / ("zenith-unsafe-plugins-" + std::to_string(::getpid()));
  fs::create_directories(folder);
  const std::string example = ZENITH_EXAMPLE_PLUGIN_DIR "/libzenith-backend-example.so";
  const auto writable = (folder / "writable.so").string();
  fs::copy_file(example, writable);
  ::chmod(writable.c_str(), 0757);
  const auto fifo = (folder / "fifo.so").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const auto foreign = (folder / "foreign.so").string();
  fs::copy_file(example, foreign);
  const bool can_give_away = ::geteuid() == 0 && ::chown(foreign.c_str(), 65534, 65534) == 0;
  ::setenv("ZENITH_PLUGIN_PATH", "relative/plugins", 1);
  discover_backends({writable, fifo, foreign});
  ::unsetenv("ZENITH_PLUGIN_PATH");
  auto reason_of = [](const std::string& path) {
    const auto* candidate = find_candidate(path);
    return candidate == nullptr ? std::string("not a candidate") : candidate->loaded ? std::string("loaded") : candidate->reason;
  };
  EXPECT_NE(reason_of(writable).find("lets every user write it"), std::string::npos) << reason_of(writable);
  EXPECT_NE(reason_of(fifo).find("not a regular file"), std::string::npos) << reason_of(fifo);
  if (can_give_away) {
    EXPECT_NE(reason_of(foreign).find("owned by user 65534"), std::string::npos) << reason_of(foreign);
  }  // else this user cannot make a file another user's; the check stays covered where it can
  EXPECT_NE(reason_of("relative/plugins").find("a relative entry"), std::string::npos) << reason_of("relative/plugins");
  zenith::testing::remove_folder(folder);
}

TEST_F(PluginLoader, CompileWorksWithBrokenPluginsOnThePath) {
  torch::NoGradGuard no_grad;
  CompileOptions options;
  options.plugin_paths = {ZENITH_TEST_PLUGIN_DIR};
  options.fallback_to_eager = false;
  auto fast = compile([](at::Tensor x) { return torch::relu(x) * 2; }, options);
  for (int call = 0; call < 2; ++call) {  // the capture, then the plan on fresh values
    auto x = torch::randn({5, 3});
    EXPECT_TRUE(torch::equal(fast(x), torch::relu(x) * 2)) << "call " << call;  // relu and * 2: exact
  }
  EXPECT_EQ(fast.report().nodes_per_backend.at("cpu"), 2);
}

TEST_F(PluginLoader, BackendOrderPicksAndSkips) {
  auto example = load_backend(ZENITH_EXAMPLE_PLUGIN_DIR "/libzenith-backend-example.so");
  EXPECT_EQ(example->name(), "example");
  EXPECT_EQ(example->priority(), 150);
  auto all = discover_backends({ZENITH_EXAMPLE_PLUGIN_DIR});
  ASSERT_GE(all.size(), 2u);
  auto position = [&](const std::string& name) {
    return std::find_if(all.begin(), all.end(), [&](const Backend* b) { return b->name() == name; }) - all.begin();
  };
  EXPECT_LT(position("example"), position("cpu"));  // higher priority first
  for (std::size_t i = 1; i < all.size(); ++i) EXPECT_GE(all[i - 1]->priority(), all[i]->priority());
  auto only_cpu = order_backends(all, {"cpu"});
  ASSERT_EQ(only_cpu.size(), 1u);
  EXPECT_EQ(only_cpu[0]->name(), "cpu");
  auto reordered = order_backends(all, {"cpu", "nonexistent", "example"});
  ASSERT_EQ(reordered.size(), 2u);
  EXPECT_EQ(reordered[0]->name(), "cpu");
}

// Found by fuzzing (tests/fuzz): a number too large for a double made the example plugin's parser
// throw nlohmann's out_of_range, reported as an internal error instead of a malformed group.
TEST_F(PluginLoader, ExamplePluginCallsAnOverflowingNumberMalformed) {
  auto example = load_backend(ZENITH_EXAMPLE_PLUGIN_DIR "/libzenith-backend-example.so");
  auto reason = example->query("7E575");
  ASSERT_TRUE(reason.has_value());
  EXPECT_NE(reason->find("INVALID_ARGUMENT"), std::string::npos) << *reason;
  EXPECT_NE(reason->find("group JSON does not parse"), std::string::npos) << *reason;
}

TEST_F(PluginLoader, ExamplePluginRunsElementwiseOpsAndCpuTheRest) {
  torch::NoGradGuard no_grad;
  CompileOptions options;
  options.plugin_paths = {ZENITH_EXAMPLE_PLUGIN_DIR};
  options.fallback_to_eager = false;
  auto fn = [](at::Tensor x, at::Tensor y) { return torch::flip(torch::relu(x) * y + x, {-1}); };
  auto fast = compile(fn, options);
  // The capture, then the plan on fresh values. relu, mul and add in float32 on the example
  // plugin, which may contract the multiply-add into one rounding: an ulp of values of order one.
  for (int call = 0; call < 3; ++call) {
    auto x = torch::randn({6, 9}), y = torch::randn({6, 9});
    EXPECT_TRUE(torch::allclose(fast(x, y), fn(x, y), 1e-6, 1e-6)) << "call " << call;
  }
  auto report = fast.report();
  EXPECT_EQ(report.nodes_per_backend.at("example"), 3);  // relu, mul, add
  EXPECT_EQ(report.nodes_per_backend.at("cpu"), 1);      // flip
}

TEST_F(PluginLoader, EnvironmentChoosesBackends) {
  torch::NoGradGuard no_grad;
  setenv("ZENITH_BACKENDS", "cpu", 1);
  CompileOptions options;
  options.plugin_paths = {ZENITH_EXAMPLE_PLUGIN_DIR};
  auto fast = compile([](at::Tensor x) { return torch::relu(x); }, options);
  unsetenv("ZENITH_BACKENDS");
  fast(torch::randn({3}));
  EXPECT_EQ(fast.report().nodes_per_backend.count("example"), 0u);
  EXPECT_EQ(fast.report().nodes_per_backend.at("cpu"), 1);
}

}  // namespace
}  // namespace zenith
