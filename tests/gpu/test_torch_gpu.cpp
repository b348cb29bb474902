// On the GPU: every zoo model compiled on CUDA with the PyTorch GPU plugin alone (the JIT plugin
// left out) runs on it and matches eager; launches follow PyTorch's current stream. Labelled `gpu`; skipped where no CUDA device is.
#include <gtest/gtest.h>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/torch.h>

#include "models/bert.h"
#include "models/cnn.h"
#include "models/llama.h"
#include "models/mlp.h"
#include "common_relative_error.h"
#include "zenith/compile.h"

namespace zenith {
namespace {

constexpr double kTolerance = 1e-5;

using testing::relative_error;

class TorchGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
    torch::manual_seed(11);
  }
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
};

TEST_F(TorchGpu, Mlp) {
  torch::NoGradGuard no_grad;
  auto config = models::MlpConfig::small();
  models::Mlp model(config);
  model->to(torch::kCUDA);
  auto fast = compile(model, strict("mlp"));
  auto x = torch::randn({16, config.in}, torch::kCUDA);
  fast(x);
  EXPECT_LE(relative_error(fast(x), model->forward(x)), kTolerance);
  expect_all_on_gpu_plugin(fast.report());
}

TEST_F(TorchGpu, Cnn) {
  torch::NoGradGuard no_grad;
  auto config = models::CnnConfig::small();
  models::Cnn model(config);
  model->eval();
  model->to(torch::kCUDA);
  auto fast = compile(model, strict("cnn"));
  auto x = torch::randn({4, config.in_channels, 32, 32}, torch::kCUDA);
  fast(x);
  EXPECT_LE(relative_error(fast(x), model->forward(x)), kTolerance);
  expect_all_on_gpu_plugin(fast.report());
}

TEST_F(TorchGpu, Bert) {
  torch::NoGradGuard no_grad;
  auto config = models::BertConfig::small();
  models::Bert model(config);
  model->eval();
  model->to(torch::kCUDA);
  auto fast = compile(model, strict("bert"));
  auto ids = torch::randint(config.vocab_size, {2, 16}, torch::TensorOptions().dtype(torch::kLong).device(torch::kCUDA));
  auto mask = torch::ones({2, 16}, ids.options());
  fast(ids, mask);
  EXPECT_LE(relative_error(fast(ids, mask), model->forward(ids, mask)), kTolerance);
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
  auto prompt = torch::randint(config.vocab_size, {1, 8}, torch::TensorOptions().dtype(torch::kLong).device(torch::kCUDA));
  auto [logits, k, v] = fast(prompt, k0, v0);
  auto [e_logits, e_k, e_v] = model->forward(prompt, k0, v0);
  EXPECT_LE(relative_error(logits, e_logits), kTolerance);
  auto token = prompt.narrow(1, 0, 1);
  auto [l1, k1, v1] = fast(token, k, v);
  auto [l2, k2, v2] = model->forward(token, e_k, e_v);
  EXPECT_LE(relative_error(l1, l2), kTolerance);
  expect_all_on_gpu_plugin(fast.report());
}

TEST_F(TorchGpu, RunsOnTheCurrentStream) {
  torch::NoGradGuard no_grad;
  torch::nn::Linear model(256, 256);
  model->to(torch::kCUDA);
  auto fast = compile(model, strict("linear"));
  auto x = torch::randn({64, 256}, torch::kCUDA);
  fast(x);
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
