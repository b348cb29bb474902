// What the training tests share (test_training.cpp, test_training_attention.cpp): the device
// they run on (built twice: on the CPU for CI and, with ZENITH_TRAINING_ON_CUDA, on the GPU, label
// gpu) and its tolerances, the fixture, zoo models with their loss inside forward, and
// check_steps, which trains an eager module and a compiled twin side by side on fresh inputs, in
// float32 or under bfloat16 autocast, and compares loss and gradients at every step.
#pragma once

#include <algorithm>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ATen/autocast_mode.h>

#include "models/bert.h"
#include "models/cnn.h"
#include "models/llama.h"
#include "models/mlp.h"
#include "training/gradient_check.h"
#include "zenith/compile.h"

namespace zenith::testing::training {

namespace models = zenith::models;

#ifdef ZENITH_TRAINING_ON_CUDA
inline const torch::Device kDevice(torch::kCUDA);
// cuDNN's batch norm and convolution algorithms against Zenith's native batch norm kernels and
// fused reductions, TF32 off: float32 rounding, summed in other orders over larger reductions.
inline constexpr double kRtol = 1e-3;
inline constexpr double kAtol = 1e-4;
#else
inline const torch::Device kDevice(torch::kCPU);
// float32 model tolerances: the compiled backward sums in another order than eager's (fused
// reductions, one matrix product over flattened rows), so gradients agree to rounding.
inline constexpr double kRtol = 1e-4;
inline constexpr double kAtol = 1e-5;
#endif

class TrainingTest : public ::testing::Test {
 protected:
  void SetUp() override {
#ifdef ZENITH_TRAINING_ON_CUDA
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
    at::globalContext().setAllowTF32CuBLAS(false);
    at::globalContext().setAllowTF32CuDNN(false);
#endif
    torch::manual_seed(1);
  }
};

inline at::Tensor on_device(at::Tensor t) { return t.to(kDevice); }

inline zenith::CompileOptions strict(const std::string& name) {
  zenith::CompileOptions options;
  options.name = name;
  options.fallback_to_eager = false;  // a missing rule fails the test instead of running eagerly
  return options;
}

inline void expect_same_gradients(torch::nn::Module& eager, torch::nn::Module& compiled, const std::string& what) {
  auto want = eager.named_parameters(true);
  auto got = compiled.named_parameters(true);
  ASSERT_EQ(want.size(), got.size());
  int compared = 0;
  for (const auto& item : want) {
    const auto& mine = got[item.key()];
    if (!item.value().requires_grad()) continue;
    expect_close(mine.grad(), item.value().grad(), kRtol, kAtol, what + ": " + item.key());
    ++compared;
  }
  EXPECT_GT(compared, 0) << what;
  for (const auto& item : eager.named_buffers(true)) {
    expect_close(compiled.named_buffers(true)[item.key()], item.value(), kRtol, kAtol, what + ": buffer " + item.key());
  }
}

// A CNN with its loss inside forward, so the compiled call holds cross_entropy too.
struct CnnLossImpl : torch::nn::Module {
  explicit CnnLossImpl(const models::CnnConfig& config) : net(register_module("net", models::Cnn(config))) {}
  torch::Tensor forward(torch::Tensor images, torch::Tensor labels) {
    return torch::cross_entropy_loss(net->forward(images), labels);
  }
  models::Cnn net;
};
TORCH_MODULE(CnnLoss);

// The last hidden state projected on a fixed random direction. Not its mean square: the final
// layer norm makes that 1 whatever the weights, so its gradients would be rounding noise (1e-9).
struct BertLossImpl : torch::nn::Module {
  explicit BertLossImpl(const models::BertConfig& config)
      : bert(register_module("bert", models::Bert(config))),
        direction(register_buffer("direction", torch::randn({config.hidden_size}))) {}
  torch::Tensor forward(torch::Tensor ids, torch::Tensor mask) {
    auto hidden = bert->forward(ids, mask);
    return (hidden * direction).mean();
  }
  models::Bert bert;
  torch::Tensor direction;
};
TORCH_MODULE(BertLoss);

struct LlamaLossImpl : torch::nn::Module {
  explicit LlamaLossImpl(const models::LlamaConfig& config) : config(config), llama(register_module("llama", models::Llama(config))) {}
  torch::Tensor forward(torch::Tensor tokens, torch::Tensor targets) {
    auto [past_k, past_v] = models::empty_cache(config, tokens.size(0), llama->lm_head->weight.options());
    auto logits = std::get<0>(llama->forward(tokens, past_k, past_v));
    return torch::cross_entropy_loss(logits.reshape({-1, config.vocab_size}), targets.reshape(-1));
  }
  models::LlamaConfig config;
  models::Llama llama;
};
TORCH_MODULE(LlamaLoss);

// The precision a training check runs its forwards in.
enum class StepPrecision {
  Float32,
  BFloat16Autocast,  // each forward in a bfloat16 autocast region, the backward outside it, as
                     // autocast's documentation asks
};

// A bfloat16 autocast region on kDevice, left as it was found.
class AutocastRegion {
 public:
  AutocastRegion() {
    at::autocast::set_autocast_enabled(kDevice.type(), true);
    at::autocast::set_autocast_dtype(kDevice.type(), at::kBFloat16);
  }
  ~AutocastRegion() {
    at::autocast::set_autocast_enabled(kDevice.type(), false);
    at::autocast::clear_cache();
  }
  AutocastRegion(const AutocastRegion&) = delete;
  AutocastRegion& operator=(const AutocastRegion&) = delete;
};

// Gradients of a step under bfloat16 autocast. Each sums many bfloat16 terms that already differ by
// a few units in the last place (2^-8 relative), and the backward carries them through every layer:
// the first layers', last in the backward, differ most. The CNN's stem batch norm's bias gradient, a
// sum of the incoming gradient with much cancellation, differed from eager's by 6.3e-2 of its
// largest element on an H100 (its convolution's by 4e-3 absolute). So each gradient is compared
// against its largest element to 0.15, while a wrong or stale gradient is off by about its own size
// (1). A gradient that vanishes analytically is rounding alone on both sides (attention's key bias:
// a constant added to every key shifts a query's scores alike, which softmax ignores), so the scale
// is at least a hundredth of the model's largest gradient element.
inline void expect_autocast_gradients(torch::nn::Module& eager, torch::nn::Module& twin, const std::string& what) {
  double largest = 0;
  for (const auto& item : eager.named_parameters()) {
    if (item.value().grad().defined()) largest = std::max(largest, item.value().grad().abs().max().item<double>());
  }
  for (const auto& item : eager.named_parameters()) {
    const auto& want = item.value().grad();
    if (!want.defined()) continue;
    const double scale = std::max(want.abs().max().item<double>(), 1e-2 * largest);
    const double differs = (twin.named_parameters()[item.key()].grad() - want).abs().max().item<double>();
    EXPECT_LT(differs / scale, 0.15) << what << ": autocast gradient of " << item.key() << " (largest element "
                                     << want.abs().max().item<double>() << ")";
  }
}

// Two identical modules; each step runs both on the same fresh inputs (`draw()`, a tuple of the
// forward's arguments), random draws (dropout) seeded alike, and compares loss and gradients: step
// 0 is the capture, later steps run the compiled forward and backward on values the capture never
// saw. In float32 within kRtol and kAtol; under autocast the loss within a few bfloat16 units (a
// fused group may round an intermediate once where eager rounds twice) and the gradients as
// expect_autocast_gradients says.
// Returns the compile report (its dump_path names the dump when `dump_dir` asks for one).
template <typename Module, typename Draw>
zenith::CompileReport check_steps(Module eager, Module twin, const std::string& what, int steps, Draw draw,
                                  const std::string& dump_dir = "",
                                  StepPrecision precision = StepPrecision::Float32) {
  const bool autocast = precision == StepPrecision::BFloat16Autocast;
  auto options = strict(what);
  options.dump_dir = dump_dir;
  auto compiled = zenith::compile(twin, options);
  for (int step = 0; step < steps; ++step) {
    eager->zero_grad();
    twin->zero_grad();
    auto args = draw();
    torch::Tensor want, got;
    {
      std::optional<AutocastRegion> region;
      if (autocast) region.emplace();
      torch::manual_seed(100 + step);
      want = std::apply([&](const auto&... a) { return eager->forward(a...); }, args);
      torch::manual_seed(100 + step);
      got = std::apply([&](const auto&... a) { return compiled(a...); }, args);
    }
    const std::string at_step = what + " step " + std::to_string(step);
    EXPECT_EQ(got.scalar_type(), want.scalar_type()) << at_step;
    want.backward();
    got.backward();
    if (autocast) {
      expect_close(got.detach(), want.detach(), 2e-2, 1e-3, at_step + ": autocast loss");
      expect_autocast_gradients(*eager, *twin, at_step);
    } else {
      expect_close(got.detach(), want.detach(), kRtol, kAtol, at_step + ": loss");
      expect_same_gradients(*eager, *twin, at_step);
    }
  }
  EXPECT_EQ(compiled.stats().training_calls, steps - 1) << "the first call is the capture\n"
                                                        << compiled.report().to_string();
  EXPECT_TRUE(compiled.report().backward.compiled);
  EXPECT_EQ(compiled.stats().eager_calls, 0) << compiled.report().fallback_reason;
  return compiled.report();
}

template <typename Module, typename Config>
std::pair<Module, Module> twins(const Config& config) {
  torch::manual_seed(7);
  Module a(config);
  torch::manual_seed(7);
  Module b(config);
  a->to(kDevice);
  b->to(kDevice);
  return {a, b};
}


}  // namespace zenith::testing::training
