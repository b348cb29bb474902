// Compiled modules on CUDA called from 8 threads at once: each thread on a stream of its own, and all
// on one shared stream; batches that change between calls (captures, symbolic instances, plan hits
// and CUDA graph replays race) and a batch that stays (its graph replays on whichever stream calls);
// two modules whose plans need the same kernels, compiled and loaded through one kernel cache at
// once. Every result is compared with eager on the same input and stream; a deadlock fails the
// test after a bound. Label gpu.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include "common/racing_threads.h"
#include "common_relative_error.h"
#include "gpu/two_layer_mlp.h"
#include "zenith/compile.h"

namespace {

using zenith::testing::relative_error;
using zenith::testing::Mlp;
using zenith::testing::no_fallback;

const torch::Device kDevice(torch::kCUDA);
constexpr int kThreads = 8;
constexpr int kCallsPerThread = 24;
// Fused kernels and cuBLASLt against eager's kernels, TF32 off: float32 roundoff through two
// matrix products of width 64 is below 1e-4 of the output's scale; a stale or half-written result
// (another call's input, a buffer overwritten by another stream's replay) is off by order one.
constexpr double kTolerance = 1e-3;
// The calls take seconds (the first captures compile kernels); reaching this means a deadlock.
constexpr auto kDeadline = std::chrono::seconds(300);
// Batches the racing calls cycle through, and the one that even threads always call with, whose
// plan is captured as a CUDA graph and replayed by whichever thread and stream comes.
constexpr std::int64_t kBatches[] = {2, 3, 4, 5, 6};
constexpr std::int64_t kSteadyBatch = 8;

class ConcurrentCallsCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
    at::globalContext().setAllowTF32CuBLAS(false);
    at::globalContext().setAllowTF32CuDNN(false);
    torch::manual_seed(41);
  }
};


Mlp cuda_mlp() {
  Mlp mlp;
  mlp->to(kDevice);
  mlp->eval();
  return mlp;
}


std::int64_t batch_of(int thread, int index) {
  return thread % 2 == 0 ? kSteadyBatch : kBatches[(thread + index) % 5];
}

// One call on the current stream: the compiled module and eager on the same fresh input.
bool matches_eager(zenith::CompiledModule<torch::Tensor(torch::Tensor)>& fast, Mlp& mlp, std::int64_t batch,
                   at::Generator& generator, const char* what) {
  auto x = torch::randn({batch, 32}, generator).to(kDevice);
  auto got = fast(x);
  auto want = mlp->forward(x);
  const double error = relative_error(got, want);
  if (error < kTolerance) return true;
  std::fprintf(stderr, "%s: batch %lld differs from eager by %g\n", what, static_cast<long long>(batch), error);
  return false;
}

// After the race: the steady batch's graph survived it and replays on this thread's stream.
void expect_the_graph_still_replays(zenith::CompiledModule<torch::Tensor(torch::Tensor)>& fast, Mlp& mlp) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(7);
  torch::NoGradGuard no_grad;
  const auto before = fast.stats().graph_replays;
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(matches_eager(fast, mlp, kSteadyBatch, generator, "after the race"));
  EXPECT_EQ(fast.stats().graph_replays, before + 3) << "the steady batch's graph replays after the race";
}

std::vector<c10::cuda::CUDAStream> pool_streams(int count) {
  std::vector<c10::cuda::CUDAStream> streams;
  for (int i = 0; i < count; ++i) streams.push_back(c10::cuda::getStreamFromPool(false, kDevice.index()));
  return streams;
}

TEST_F(ConcurrentCallsCuda, EightThreadsOnStreamsOfTheirOwnMatchEager) {
  auto mlp = cuda_mlp();
  auto fast = zenith::compile(mlp, no_fallback("own streams"));
  const auto streams = pool_streams(kThreads);
  int failures = zenith::testing::run_racing(kThreads, kCallsPerThread, kDeadline, [&](int thread, int i, at::Generator& generator) {
    c10::cuda::CUDAStreamGuard on(streams[thread]);
    return matches_eager(fast, mlp, batch_of(thread, i), generator, "own streams");
  });
  EXPECT_EQ(failures, 0);
  const auto stats = fast.stats();
  EXPECT_EQ(stats.hits + stats.misses + stats.instantiations, kThreads * kCallsPerThread) << "every call counted once";
  EXPECT_EQ(stats.eager_calls, 0);
  EXPECT_EQ(stats.graph_failures, 0);
  std::printf("own streams: %lld graph replays, %lld launch-by-launch runs with a graph held, %lld captures\n",
              static_cast<long long>(stats.graph_replays), static_cast<long long>(stats.graph_plain_runs),
              static_cast<long long>(stats.graph_captures));
  expect_the_graph_still_replays(fast, mlp);
}

TEST_F(ConcurrentCallsCuda, EightThreadsOnOneStreamMatchEager) {
  auto mlp = cuda_mlp();
  auto fast = zenith::compile(mlp, no_fallback("one stream"));
  const auto shared = c10::cuda::getStreamFromPool(false, kDevice.index());
  int failures = zenith::testing::run_racing(kThreads, kCallsPerThread, kDeadline, [&](int thread, int i, at::Generator& generator) {
    c10::cuda::CUDAStreamGuard on(shared);
    return matches_eager(fast, mlp, batch_of(thread, i), generator, "one stream");
  });
  EXPECT_EQ(failures, 0);
  EXPECT_EQ(fast.stats().eager_calls, 0);
  EXPECT_EQ(fast.stats().graph_failures, 0);
  expect_the_graph_still_replays(fast, mlp);
}

TEST_F(ConcurrentCallsCuda, TwoModulesSharingTheKernelCacheMatchEager) {
  // Same shapes, other weights: both plans need the same generated kernels, which the JIT CUDA
  // plugin compiles once per key while the other module's capture waits for it or loads it.
  auto first = cuda_mlp(), second = cuda_mlp();
  auto fast_first = zenith::compile(first, no_fallback("first")), fast_second = zenith::compile(second, no_fallback("second"));
  const auto streams = pool_streams(kThreads);
  int failures = zenith::testing::run_racing(kThreads, kCallsPerThread, kDeadline, [&](int thread, int i, at::Generator& generator) {
    c10::cuda::CUDAStreamGuard on(streams[thread]);
    const bool odd = thread % 2 == 1;
    return matches_eager(odd ? fast_second : fast_first, odd ? second : first, kBatches[(thread / 2 + i) % 5], generator,
                         odd ? "second module" : "first module");
  });
  EXPECT_EQ(failures, 0);
  EXPECT_EQ(fast_first.stats().eager_calls + fast_second.stats().eager_calls, 0);
  EXPECT_EQ(fast_first.stats().graph_failures + fast_second.stats().graph_failures, 0);
}

}  // namespace
