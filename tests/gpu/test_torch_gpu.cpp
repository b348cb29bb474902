// On the GPU: every zoo model compiled on CUDA with the PyTorch GPU plugin alone (the JIT plugin
// left out) runs on it and matches eager, on fresh inputs at every call of a signature; launches
// follow PyTorch's current stream. Labelled `gpu`; skipped where no CUDA device is.
#include <gtest/gtest.h>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/torch.h>

#include "models/bert.h"
#include "models/cnn.h"
#include "models/llama.h"
#include "models/mlp.h"
#include "common/fresh_inputs.h"
#include "common_relative_error.h"
#include "zenith/compile.h"

namespace zenith {
namespace {

// The PyTorch GPU plugin runs PyTorch's own CUDA kernels on the same values as eager; what moves a
// result is cuBLAS or cuDNN picking another algorithm (another summation order) for another
// alignment of an operand, or another memory layout (CUDA inference runs convolutions channels-last):
// ulps of partial sums over a few layers. cuDNN's TF32 is turned off for these tests, since with it
// two algorithms differ by TF32 rounding (2^-11 per input) instead. A stale value is off by order one.
constexpr double kTolerance = 1e-5;

using testing::call_name;
using testing::fresh_like;
using testing::kCallsPerSignature;
using testing::relative_error;

class TorchGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
    torch::manual_seed(11);
    allowed_tf32_ = at::globalContext().allowTF32CuDNN();
    at::globalContext().setAllowTF32CuDNN(false);
  }
  void TearDown() override { at::globalContext().setAllowTF32CuDNN(allowed_tf32_); }
  static CompileOptions strict(const std::string& name) {
    CompileOptions options;
    options.name = name;
    options.fallback_to_eager = false;
    options.backends = {"torch_gpu", "cpu"};
    return options;
  }
  static void expect_all_on_gpu_plugin(const CompileReport& report) {
    EXPECT_GT(report.nodes_per_backend.count("torch_gpu") ? report.nodes_per_backend.at("torch_gpu") : 0, 0);
    EXPECT_EQ(report.nodes_per_backend.count("cpu"), 0u) << "a CUDA graph must not run on the CPU plugin";
    EXPECT_EQ(report.nodes_per_backend.count("jit_cuda"), 0u) << "the JIT plugin was left out";
  }

 private:
  bool allowed_tf32_ = true;
};

TEST_F(TorchGpu, Mlp) {
  torch::NoGradGuard no_grad;
  auto config = models::MlpConfig::small();
  models::Mlp model(config);
  model->to(torch::kCUDA);
  auto fast = compile(model, strict("mlp"));
  for (int call = 0; call < kCallsPerSignature; ++call) {
    auto x = torch::randn({16, config.in}, torch::kCUDA);
    EXPECT_LE(relative_error(fast(x), model->forward(x)), kTolerance) << call_name(call);
  }
  expect_all_on_gpu_plugin(fast.report());
}

TEST_F(TorchGpu, Cnn) {
  torch::NoGradGuard no_grad;
  auto config = models::CnnConfig::small();
  models::Cnn model(config);
  model->eval();
  model->to(torch::kCUDA);
  auto fast = compile(model, strict("cnn"));
  for (int call = 0; call < kCallsPerSignature; ++call) {
    auto x = torch::randn({4, config.in_channels, 32, 32}, torch::kCUDA);
    EXPECT_LE(relative_error(fast(x), model->forward(x)), kTolerance) << call_name(call);
  }
  expect_all_on_gpu_plugin(fast.report());
}

TEST_F(TorchGpu, Bert) {
  torch::NoGradGuard no_grad;
  auto config = models::BertConfig::small();
  models::Bert model(config);
  model->eval();
  model->to(torch::kCUDA);
  auto fast = compile(model, strict("bert"));
  for (int call = 0; call < kCallsPerSignature; ++call) {
    auto ids = torch::randint(config.vocab_size, {2, 16}, torch::TensorOptions().dtype(torch::kLong).device(torch::kCUDA));
    auto mask = torch::ones({2, 16}, ids.options());
    mask.index_put_({0, torch::indexing::Slice(8 + call)}, 0);  // the padding moves too
    EXPECT_LE(relative_error(fast(ids, mask), model->forward(ids, mask)), kTolerance) << call_name(call);
  }
  expect_all_on_gpu_plugin(fast.report());
}

TEST_F(TorchGpu, LlamaWithCache) {
  torch::NoGradGuard no_grad;
  auto config = models::LlamaConfig::small();
  models::Llama model(config);
  model->eval();
  model->to(torch::kCUDA);
  auto fast = compile(model, strict("llama"));
  auto [k0, v0] = models::empty_cache(config, 1, torch::TensorOptions().device(torch::kCUDA));
  auto tokens = [&](std::int64_t length) {
    return torch::randint(config.vocab_size, {1, length}, torch::TensorOptions().dtype(torch::kLong).device(torch::kCUDA));
  };
  // The prompt's signature, then one decode step's, each on fresh tokens (and a fresh cache) at
  // every call.
  at::Tensor k, v, e_k, e_v;
  for (int call = 0; call < kCallsPerSignature; ++call) {
    auto prompt = tokens(8);
    auto [logits, k1, v1] = fast(prompt, k0, v0);
    auto [e_logits, e_k1, e_v1] = model->forward(prompt, k0, v0);
    EXPECT_LE(relative_error(logits, e_logits), kTolerance) << "prompt, " << call_name(call);
    k = k1, v = v1, e_k = e_k1, e_v = e_v1;
  }
  for (int call = 0; call < kCallsPerSignature; ++call) {
    auto token = tokens(1);
    auto cache_k = call == 0 ? k : fresh_like(k), cache_v = call == 0 ? v : fresh_like(v);
    auto eager_k = call == 0 ? e_k : cache_k, eager_v = call == 0 ? e_v : cache_v;
    auto [l1, k1, v1] = fast(token, cache_k, cache_v);
    auto [l2, k2, v2] = model->forward(token, eager_k, eager_v);
    EXPECT_LE(relative_error(l1, l2), kTolerance) << "decode, " << call_name(call);
  }
  expect_all_on_gpu_plugin(fast.report());
}

TEST_F(TorchGpu, RunsOnTheCurrentStream) {
  torch::NoGradGuard no_grad;
  torch::nn::Linear model(256, 256);
  model->to(torch::kCUDA);
  auto fast = compile(model, strict("linear"));
  auto first = torch::randn({64, 256}, torch::kCUDA);
  EXPECT_LE(relative_error(fast(first), model->forward(first)), kTolerance) << call_name(0);
  auto x = torch::randn({64, 256}, torch::kCUDA);  // the plan's call, on fresh values
  auto side = at::cuda::getStreamFromPool();
  at::Tensor got;
  {
    c10::cuda::CUDAStreamGuard guard(side);
    got = fast(x);  // queued on `side`; reading it on the default stream needs the sync below
  }
  side.synchronize();
  EXPECT_LE(relative_error(got, model->forward(x)), kTolerance);
}

}  // namespace
}  // namespace zenith
