// Dynamic shapes on CUDA, by counts: after the first lengths, a sweep of 100 random sequence
// lengths compiles no kernel and recaptures nothing, every output matching eager; and a symbolic
// plan built with 32-bit kernels, asked for more than 2^31 elements, compiles their 64-bit versions
// instead of overflowing. Timing (latency linear in the length, no stalls) is measured by
// examples/dynamic_shapes on the GPU machine, never here. Labelled `gpu`. Every size is called
// twice, on fresh values each time, and both calls are compared with eager.
//
// Tolerances, as max |zenith - eager| / max |eager| (tests/common_relative_error.h): float32 1e-4
// and float16 2e-2, the model zoo's on CUDA and for the same reasons (tests/gpu/test_zoo_cuda.cpp:
// CUDA's math functions, block-wide row sums, one rounding per fused group).
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <random>

#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>

#include "models/bert.h"
#include "common_relative_error.h"
#include "zenith/compile.h"

namespace zenith {
namespace {

using testing::relative_error;

constexpr int kCallsPerSize = 2;

CompileOptions strict(const std::string& name) {
  CompileOptions options;
  options.name = name;
  options.fallback_to_eager = false;
  return options;
}

std::vector<std::int64_t> random_lengths(int count, std::int64_t low, std::int64_t high, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::int64_t> length(low, high);
  std::vector<std::int64_t> lengths;
  for (int i = 0; i < count; ++i) lengths.push_back(length(rng));
  return lengths;
}

struct LinearReluImpl : torch::nn::Module {
  torch::nn::Linear linear{nullptr};
  LinearReluImpl() { linear = register_module("linear", torch::nn::Linear(1024, 1024)); }
  torch::Tensor forward(torch::Tensor x) { return torch::relu(linear(x)); }
};
TORCH_MODULE(LinearRelu);

// The torture test's model and sizes: batch 32, sequence 100..1000, automatic mode.
TEST(DynamicShapesCuda, HundredRandomLengthsCompileNothingAfterTheFirst) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::NoGradGuard no_grad;
  torch::manual_seed(61);
  LinearRelu model;
  model->to(torch::kCUDA);
  auto fast = compile(model, strict("linear-relu"));
  const auto options = torch::TensorOptions().device(torch::kCUDA);
  auto expect_computed = [&](std::int64_t length) {
    for (int call = 0; call < kCallsPerSize; ++call) {
      auto x = torch::randn({32, length, 1024}, options);
      ASSERT_LE(relative_error(fast(x), model->forward(x)), 1e-4) << "length " << length << ", call " << call;
    }
  };
  for (std::int64_t warm : {300, 517}) expect_computed(warm);
  const auto warmed = fast.stats();
  ASSERT_EQ(warmed.symbolic_plans, 1) << fast.report().to_string();
  // The plan has its product's launches: compiled now, found in the kernel cache (the product's
  // matrix-vector kernel), or run by a library without compiling.
  const auto warmed_report = fast.report();
  ASSERT_GT(warmed.kernels_compiled + warmed_report.kernel_cache_hits + warmed_report.groups_without_compile, 0);
  for (auto length : random_lengths(100, 100, 1000, 62)) expect_computed(length);
  const auto swept = fast.stats();
  EXPECT_EQ(swept.kernels_compiled, warmed.kernels_compiled) << "no compile after the first lengths";
  EXPECT_EQ(swept.recaptures, warmed.recaptures) << fast.report().static_reason;
  EXPECT_EQ(swept.misses, warmed.misses);
  EXPECT_GT(swept.instantiations, 0);
}

TEST(DynamicShapesCuda, BertBaseSequenceSweepInHalfPrecision) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::NoGradGuard no_grad;
  torch::manual_seed(63);
  auto config = models::BertConfig::base();
  models::Bert model(config);
  model->eval();
  model->to(torch::kCUDA, torch::kHalf);
  auto fast = compile(model, strict("bert-base"));
  const auto tokens = torch::TensorOptions().dtype(torch::kLong).device(torch::kCUDA);
  // Fresh tokens and a padding that moves with the call, at every call.
  auto expect_computed = [&](std::int64_t length) {
    for (int call = 0; call < kCallsPerSize; ++call) {
      auto ids = torch::randint(config.vocab_size, {2, length}, tokens);
      auto mask = torch::ones({2, length}, tokens);
      mask.index_put_({1, torch::indexing::Slice(length / 3 + call)}, 0);
      auto got = fast(ids, mask), want = model->forward(ids, mask);
      ASSERT_LE(relative_error(got.to(at::kFloat), want.to(at::kFloat)), 2e-2) << "length " << length << ", call " << call;
    }
  };
  expect_computed(128);
  expect_computed(200);
  const auto warmed = fast.stats();
  ASSERT_EQ(warmed.symbolic_plans, 1) << fast.report().static_reason;
  for (auto length : random_lengths(20, 8, 512, 64)) expect_computed(length);
  const auto swept = fast.stats();
  EXPECT_EQ(swept.kernels_compiled, warmed.kernels_compiled);
  EXPECT_EQ(swept.recaptures, warmed.recaptures);
  EXPECT_GT(swept.instantiations, 0);
}

// 2^31 + 4099 bfloat16 elements: the base plan's kernel uses 32-bit offsets, so the instance for
// this size must compile (or load) its 64-bit version. Memory as in test_zoo_cuda's huge test.
constexpr std::int64_t kHugeElements = (std::int64_t{1} << 31) + 4099;
constexpr std::size_t kHugeFreeBytes = std::size_t{24} << 30;

at::Tensor chain(at::Tensor x) { return torch::relu(x * 2 + 1); }

TEST(DynamicShapesCuda, AnInstancePastTwoToThe31GetsSixtyFourBitKernels) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  c10::cuda::CUDACachingAllocator::emptyCache();
  std::size_t free_bytes = 0, total_bytes = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total_bytes), cudaSuccess);
  if (free_bytes < kHugeFreeBytes) GTEST_SKIP() << "needs " << (kHugeFreeBytes >> 30) << " GiB free";
  torch::NoGradGuard no_grad;
  torch::manual_seed(65);
  auto options = strict("huge-dynamic");
  options.dynamic_dims = {{0, 0}};
  auto fast = compile(&chain, options);
  const auto bf16 = torch::TensorOptions().dtype(at::kBFloat16).device(torch::kCUDA);
  for (int call = 0; call < kCallsPerSize; ++call) {
    auto small = torch::randn({std::int64_t{1} << 20}, bf16);
    EXPECT_LE(relative_error(fast(small).to(at::kFloat), chain(small).to(at::kFloat)), 4e-2) << "2^20, call " << call;
  }
  ASSERT_EQ(fast.stats().symbolic_plans, 1) << fast.report().static_reason;
  // Two calls at the huge size (the instance, then its replay on fresh values), one at a time.
  for (int call = 0; call < kCallsPerSize; ++call) {
    auto x = torch::randn({kHugeElements}, bf16);
    auto got = fast(x);
    EXPECT_EQ(fast.stats().recaptures, 0);
    EXPECT_EQ(fast.stats().instantiations, 1);
    const std::int64_t boundary = std::int64_t{1} << 31;
    for (std::int64_t start : {std::int64_t{0}, boundary - 2048, kHugeElements - 4096}) {
      auto want = chain(x.narrow(0, start, 4096));
      EXPECT_LE(relative_error(got.narrow(0, start, 4096).to(at::kFloat), want.to(at::kFloat)), 4e-2)
          << "at " << start << ", call " << call;
    }
    auto sample = x.slice(0, 0, kHugeElements, 999983);
    EXPECT_LE(relative_error(got.slice(0, 0, kHugeElements, 999983).to(at::kFloat), chain(sample).to(at::kFloat)), 4e-2)
        << "call " << call;
  }
}

}  // namespace
}  // namespace zenith
