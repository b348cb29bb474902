// The JIT CUDA backend's index-copy kernel (backends/cuda/index_copy_codegen.h) on the GPU, against
// eager: a static KV cache written at a step's positions, as decoders write theirs, in every
// floating dtype, along the sequence dimension and others, one position and several, from a
// source that is not contiguous. The write sits between two elementwise kernels, so in the plan's
// CUDA graph (taken from the second call on) it is dispatched while the kernel before it ends and
// the kernel after it is dispatched while it runs (backends/cuda/programmatic_launch.h): a kernel
// that read before its wait would see the last call's values. Labelled `gpu`.
//
// Tolerance: none for the cache (both sides copy the same bytes: the entries times 2, exact in
// every dtype); the result computes cache * 0.5 + 1 in float32 and rounds once on both sides, so
// it is equal too.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <torch/torch.h>

#include "common/no_fallback.h"
#include "zenith/compile.h"

namespace zenith {
namespace {

using testing::no_fallback;

class JitCudaIndexCopy : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
    torch::manual_seed(17);
  }
};

struct Write {
  std::int64_t dim, count;
};

TEST_F(JitCudaIndexCopy, CacheWritesAgainstEagerAcrossDtypesDimsAndPositions) {
  torch::NoGradGuard no_grad;
  constexpr int kCalls = 5;  // the capture, a run launch by launch, then replays of the graph
  for (auto dtype : {at::kFloat, at::kHalf, at::kBFloat16}) {
    const auto options = torch::TensorOptions().dtype(dtype).device(torch::kCUDA);
    for (const auto& w : {Write{2, 1}, Write{2, 3}, Write{1, 2}, Write{-1, 1}}) {
      const std::string what = fmt::format("{} dim {} positions {}", c10::toString(dtype), w.dim, w.count);
      auto fn = [w](at::Tensor cache, at::Tensor positions, at::Tensor entries) {
        cache.index_copy_(w.dim, positions, entries * 2);
        return cache * 0.5 + 1;
      };
      auto fast = compile(fn, no_fallback("index copy"));
      // One layer of a stacked cache [layers, batch, heads, length, head dim], refilled between
      // calls as generation reuses its cache; the same tensor every call, so the graph replays.
      auto stacked = torch::empty({3, 2, 4, 32, 16}, options), theirs_stacked = torch::empty_like(stacked);
      auto mine = stacked.select(0, 1), theirs = theirs_stacked.select(0, 1);
      const auto along = w.dim < 0 ? w.dim + 4 : w.dim;
      for (int call = 0; call < kCalls; ++call) {
        const std::string at_call = what + ", call " + std::to_string(call);
        stacked.copy_(torch::randn(stacked.sizes(), options));
        theirs_stacked.copy_(stacked);
        auto positions = torch::randperm(mine.size(along), torch::TensorOptions().dtype(at::kLong).device(torch::kCUDA))
                             .slice(0, 0, w.count);
        auto sizes = mine.sizes().vec();
        sizes[static_cast<std::size_t>(along)] = w.count;
        std::swap(sizes[2], sizes[3]);
        auto entries = torch::randn(sizes, options).transpose(2, 3);  // not contiguous
        auto got = fast(mine, positions, entries);
        auto want = fn(theirs, positions, entries);
        EXPECT_TRUE(torch::equal(mine, theirs)) << at_call << ": the cache written";
        EXPECT_TRUE(torch::equal(stacked, theirs_stacked)) << at_call << ": the other layers untouched";
        EXPECT_TRUE(torch::equal(got, want)) << at_call << ": the result read after the write";
      }
      EXPECT_GE(fast.stats().graph_replays, 2) << what;
      auto report = fast.report();
      EXPECT_EQ(report.nodes_per_backend.count("torch_gpu"), 0u) << what << "\n" << report.to_string();
    }
  }
}

}  // namespace
}  // namespace zenith
