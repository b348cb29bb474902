// One compiled module called from 8 threads at once, with shapes that change between calls:
// captures, symbolic instances, plan hits and value checks race. Every result is compared with
// eager on the same input; a deadlock fails the test after a bound instead of hanging it.
#include <gtest/gtest.h>

#include <chrono>

#include <torch/script.h>
#include <torch/torch.h>

#include "common/racing_threads.h"
#include "common_relative_error.h"
#include "zenith/compile.h"

namespace zenith {
namespace {

using testing::relative_error;

constexpr int kThreads = 8;
constexpr int kCallsPerThread = 24;
// The CPU plugin runs ATen's kernels in eager's order; 1e-5 leaves room for another thread count's
// summation order in a matrix product, and nothing more: a wrong or stale value is off by order one.
constexpr double kTolerance = 1e-5;
// Far above what the calls take (about a second on two cores): reaching it means a deadlock.
constexpr auto kDeadline = std::chrono::seconds(120);

int run_racing(const testing::RacingCall& call) {
  return testing::run_racing(kThreads, kCallsPerThread, kDeadline, call);
}

at::Tensor mlp(const at::Tensor& x, const at::Tensor& w1, const at::Tensor& w2) {
  return torch::matmul(torch::gelu(torch::matmul(x, w1)) * 2 + 1, w2).tanh();
}

TEST(ConcurrentCalls, EightThreadsWithChangingShapesMatchEager) {
  torch::manual_seed(31);
  auto w1 = torch::randn({16, 32}) / 4, w2 = torch::randn({32, 8}) / 4;
  auto fn = [&](at::Tensor x) { return mlp(x, w1, w2); };
  auto fast = compile(fn);
  const std::int64_t batches[] = {2, 3, 4, 5, 6};
  int failures = run_racing([&](int thread, int i, at::Generator& generator) {
    auto x = torch::randn({batches[(thread + i) % 5], 16}, generator);
    return relative_error(fast(x), fn(x)) < kTolerance;
  });
  EXPECT_EQ(failures, 0);
  const auto stats = fast.stats();
  EXPECT_EQ(stats.hits + stats.misses + stats.instantiations, kThreads * kCallsPerThread) << "every call counted once";
  EXPECT_EQ(stats.eager_calls, 0);
}

TEST(ConcurrentCalls, RacingValueChecksRunEachCallOnTheRightPath) {
  torch::manual_seed(32);
  auto fn = [](at::Tensor x, at::Tensor flag) {
    auto h = x * 2 + 1;
    return (flag.sum() > 0).item<bool>() ? h.relu() : h.sigmoid();
  };
  auto fast = compile(fn);
  auto on = torch::ones({2}, at::kLong), off = -on;
  int failures = run_racing([&](int thread, int i, at::Generator& generator) {
    auto x = torch::randn({4, 8}, generator);
    // Most calls read the captured value; every fifth thread's odd calls another one.
    const auto& flag = thread % 5 == 0 && i % 2 == 1 ? off : on;
    return relative_error(fast(x, flag), fn(x, flag)) < kTolerance;
  });
  EXPECT_EQ(failures, 0);
  EXPECT_EQ(fast.report().value_checks.size(), 1u) << fast.report().to_string();
}

TEST(ConcurrentCalls, AScriptedModuleFromEightThreadsMatchesEager) {
  torch::manual_seed(33);
  torch::jit::Module scripted("Block");
  scripted.register_parameter("w", torch::randn({16, 16}) / 4, false);
  scripted.register_buffer("shift", torch::randn({16}));
  scripted.define(R"(
    def forward(self, x):
        h = torch.matmul(x, self.w) + self.shift
        return torch.softmax(torch.relu(h), dim=-1) * x.size(0)
  )");
  scripted.eval();
  auto fast = compile(scripted);
  int failures = run_racing([&](int thread, int i, at::Generator& generator) {
    auto x = torch::randn({1 + (thread + i) % 4, 16}, generator);
    auto got = fast({x}).toTensor();
    auto want = scripted.forward({x}).toTensor();
    return relative_error(got, want) < kTolerance;
  });
  EXPECT_EQ(failures, 0);
  EXPECT_EQ(fast.stats().eager_calls, 0);
}

}  // namespace
}  // namespace zenith
