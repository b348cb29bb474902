// Training through compiled modules: the zoo's gradients against eager autograd, optimizer steps,
// train/eval plans, dropout, the eager fallback for ops without a rule, double backward, the dump
// of the backward. Every comparison with eager draws fresh inputs at every call (the first call of
// a signature is its capture, the later ones its compiled plan), from a generator each test seeds.
// Autocast and attention: test_training_attention.cpp.
#include <filesystem>
#include <tuple>

#include <unistd.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/dump.h"
#include "training/training_checks.h"

namespace {

using namespace zenith::testing::training;
using zenith::testing::expect_close;

TEST_F(TrainingTest, ZooCnnWithBatchNormAndCrossEntropy) {
  auto [eager, twin] = twins<CnnLoss>(models::CnnConfig::small());
  eager->train();
  twin->train();
  check_steps(eager, twin, "cnn", 3, [] {
    return std::make_tuple(on_device(torch::randn({4, 3, 32, 32})), on_device(torch::randint(10, {4})));
  });
}

TEST_F(TrainingTest, ZooBertWithDropout) {
  // Dropout in training mode: Zenith's native_dropout draws the same Bernoulli numbers as eager's
  // dropout on the CPU, so with one seed the two agree exactly.
  auto config = models::BertConfig::small();
  auto [eager, twin] = twins<BertLoss>(config);
  eager->train();
  twin->train();
  auto compiled = zenith::compile(twin, strict("bert"));
  auto mask = on_device(torch::ones({2, 8}, torch::kLong));
  for (int step = 0; step < 3; ++step) {
    eager->zero_grad();
    twin->zero_grad();
    auto ids = on_device(torch::randint(config.vocab_size, {2, 8}));  // fresh tokens every step
    torch::manual_seed(100 + step);
    auto want = eager->forward(ids, mask);
    torch::manual_seed(100 + step);
    auto got = compiled(ids, mask);
    want.backward();
    got.backward();
    expect_close(got.detach(), want.detach(), kRtol, kAtol, "bert: loss");
    expect_same_gradients(*eager, *twin, "bert step " + std::to_string(step));
  }
  EXPECT_EQ(compiled.stats().training_calls, 2);
}

TEST_F(TrainingTest, ZooLlamaWithCrossEntropy) {
  auto config = models::LlamaConfig::small();
  auto [eager, twin] = twins<LlamaLoss>(config);
  check_steps(eager, twin, "llama", 3, [&] {
    return std::make_tuple(on_device(torch::randint(config.vocab_size, {2, 8})),
                           on_device(torch::randint(config.vocab_size, {2, 8})));
  });
}

TEST_F(TrainingTest, ZooMlp) {
  models::MlpConfig config;
  config.in = 16;
  config.hidden = {32, 32};
  config.out = 8;
  auto [eager, twin] = twins<models::Mlp>(config);
  auto compiled = zenith::compile(twin, strict("mlp"));
  for (int step = 0; step < 3; ++step) {
    eager->zero_grad();
    twin->zero_grad();
    auto x = on_device(torch::randn({5, 16}));
    auto w = on_device(torch::randn({5, 8}));
    (eager->forward(x) * w).sum().backward();
    (compiled(x) * w).sum().backward();
    expect_same_gradients(*eager, *twin, "mlp step " + std::to_string(step));
  }
  // GELU's output, read by the next layer's weight gradient, is recomputed from its input.
  EXPECT_GT(compiled.report().backward.recomputed_values, 0) << compiled.report().to_string();
}

TEST_F(TrainingTest, OptimizerAndClippingSeeTheGradients) {
  auto [eager, twin] = twins<CnnLoss>(models::CnnConfig::small());
  auto compiled = zenith::compile(twin, strict("sgd"));
  torch::optim::SGD eager_sgd(eager->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  torch::optim::SGD twin_sgd(twin->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  // Two batches in turn: every call after the capture runs the plan on other values than the last
  // call's, and the loss on the first batch still shows the training. After each step the twin
  // takes the eager weights again (in place, so the plan still reads the live tensors): two
  // independent trajectories drift apart from one rounding difference (the batch-norm CNN
  // memorizes its batches), and the comparison is of one step at the same weights.
  const at::Tensor images[] = {on_device(torch::randn({4, 3, 32, 32})), on_device(torch::randn({4, 3, 32, 32}))};
  const at::Tensor labels[] = {on_device(torch::randint(10, {4})), on_device(torch::randint(10, {4}))};
  std::vector<double> losses;
  for (int step = 0; step < 6; ++step) {
    eager_sgd.zero_grad();
    twin_sgd.zero_grad();
    auto want = eager->forward(images[step % 2], labels[step % 2]);
    auto got = compiled(images[step % 2], labels[step % 2]);
    want.backward();
    got.backward();
    const double want_norm = torch::nn::utils::clip_grad_norm_(eager->parameters(), 1.0);
    const double got_norm = torch::nn::utils::clip_grad_norm_(twin->parameters(), 1.0);
    EXPECT_NEAR(got_norm, want_norm, 1e-4 * want_norm) << "step " << step;
    eager_sgd.step();
    twin_sgd.step();
    EXPECT_NEAR(got.item<double>(), want.item<double>(), 1e-4) << "step " << step;
    losses.push_back(got.item<double>());
    torch::NoGradGuard no_grad;
    const auto eager_state = eager->parameters();
    const auto twin_state = twin->parameters();
    for (std::size_t i = 0; i < eager_state.size(); ++i) twin_state[i].copy_(eager_state[i]);
  }
  EXPECT_LT(losses[4], losses[0]);  // the first batch again: the parameters the plan reads are the live ones
  EXPECT_EQ(compiled.stats().training_calls, 5);
}

TEST_F(TrainingTest, TrainAndEvalAreSeparatePlans) {
  auto [eager, twin] = twins<CnnLoss>(models::CnnConfig::small());
  auto compiled = zenith::compile(twin, strict("modes"));
  for (bool training : {true, false, true, false}) {
    eager->train(training);
    twin->train(training);
    for (int call = 0; call < 2; ++call) {
      eager->zero_grad();
      twin->zero_grad();
      auto images = on_device(torch::randn({2, 3, 32, 32}));
      auto labels = on_device(torch::randint(10, {2}));
      eager->forward(images, labels).backward();
      compiled(images, labels).backward();
      expect_same_gradients(*eager, *twin, training ? "train" : "eval");
    }
  }
  EXPECT_EQ(compiled.stats().misses, 2);  // one plan per mode, then hits
  EXPECT_EQ(compiled.stats().training_calls, 6);
}

struct DropoutNetImpl : torch::nn::Module {
  DropoutNetImpl() : linear(register_module("linear", torch::nn::Linear(16, 16))), dropout(register_module("dropout", torch::nn::Dropout(0.5))) {}
  torch::Tensor forward(torch::Tensor x) { return dropout->forward(torch::tanh(linear->forward(x))); }
  torch::nn::Linear linear;
  torch::nn::Dropout dropout;
};
TORCH_MODULE(DropoutNet);

TEST_F(TrainingTest, DropoutIsFreshEveryCallAndReproducibleWithASeed) {
  DropoutNet net;
  net->to(kDevice);
  net->train();
  auto compiled = zenith::compile(net, strict("dropout"));
  auto x = on_device(torch::randn({8, 16})).requires_grad_(true);
  compiled(on_device(torch::randn({8, 16})).requires_grad_(true));  // capture, on other values
  auto run = [&](int seed, const at::Tensor& input) {
    torch::manual_seed(seed);
    net->zero_grad();
    auto leaf = input.detach().clone().requires_grad_(true);
    auto y = compiled(leaf);
    auto w = torch::ones_like(y);
    (y * w).sum().backward();
    return std::make_tuple(y.detach(), leaf.grad(), net->linear->weight.grad().clone());
  };
  auto [y1, gx1, gw1] = run(3, x);
  auto [y2, gx2, gw2] = run(3, x);
  auto [y3, gx3, gw3] = run(4, x);
  EXPECT_TRUE(torch::equal(y1, y2));
  EXPECT_TRUE(torch::equal(gx1, gx2));
  EXPECT_TRUE(torch::equal(gw1, gw2));
  EXPECT_FALSE(torch::equal(y1, y3));  // another draw
  // The gradient passes exactly where the output kept its value, scaled by 1 / (1 - p).
  auto kept = (y1 != 0).to(torch::kFloat);  // (a kept value of exactly 0 has probability 0)
  auto t = torch::tanh(net->linear->forward(x.detach()));
  // 1e-5: the same float32 products and tanh, the plan's matrix product summing in its own order.
  expect_close(gx1, torch::mm(kept * 2.0 * (1 - t * t), net->linear->weight.detach()), 1e-5, 1e-6, "dropout input grad");
  // And on fresh values: the mask and the gradient follow the new input.
  auto fresh = on_device(torch::randn({8, 16}));
  auto [y4, gx4, gw4] = run(3, fresh);
  auto kept4 = (y4 != 0).to(torch::kFloat);
  auto t4 = torch::tanh(net->linear->forward(fresh));
  expect_close(y4, kept4 * 2.0 * t4, 1e-5, 1e-6, "dropout output, fresh input");
  expect_close(gx4, torch::mm(kept4 * 2.0 * (1 - t4 * t4), net->linear->weight.detach()), 1e-5, 1e-6,
               "dropout input grad, fresh input");
  EXPECT_EQ(compiled.stats().training_calls, 4);
}

TEST_F(TrainingTest, OpWithoutRuleRunsEagerlyWithOneWarning) {
  auto fn = [](at::Tensor x) { return torch::cumsum(x, 0) * x; };
  zenith::CompileOptions options;
  options.name = "cumsum";
  auto compiled = zenith::compile(fn, options);
  ::testing::internal::CaptureStderr();
  for (int n : {4, 4, 6, 6}) {
    auto x = on_device(torch::randn({n, 3}, torch::kDouble)).requires_grad_(true);
    auto y = compiled(x);
    y.sum().backward();
    auto leaf = x.detach().clone().requires_grad_(true);
    fn(leaf).sum().backward();
    expect_close(x.grad(), leaf.grad(), 1e-12, 1e-12, "eager gradient");
  }
  auto log = ::testing::internal::GetCapturedStderr();
  std::size_t warnings = 0;
  for (std::size_t at = log.find("warn"); at != std::string::npos; at = log.find("warn", at + 1)) ++warnings;
  EXPECT_EQ(warnings, 1u) << log;
  EXPECT_NE(log.find("aten::cumsum has no derivative rule"), std::string::npos) << log;
  EXPECT_TRUE(compiled.report().eager_fallback);
  EXPECT_EQ(compiled.stats().eager_calls, 4);
}

// einsum's rule covers every equation but one that reads a diagonal (a letter twice in one
// operand): that signature runs eagerly, its log naming why, with eager's gradients.
TEST_F(TrainingTest, AnEinsumThatReadsADiagonalRunsEagerly) {
  auto fn = [](at::Tensor a, at::Tensor b) { return torch::einsum("ii,ij->ij", {a, b}) + torch::einsum("ij,jk", {a, b}); };
  zenith::CompileOptions options;
  options.name = "einsum diagonal";
  auto compiled = zenith::compile(fn, options);
  ::testing::internal::CaptureStderr();
  for (int call = 0; call < 3; ++call) {
    auto a = on_device(torch::randn({4, 4}, torch::kDouble)).requires_grad_(true);
    auto b = on_device(torch::randn({4, 3}, torch::kDouble)).requires_grad_(true);
    compiled(a, b).sum().backward();
    auto a2 = a.detach().clone().requires_grad_(true), b2 = b.detach().clone().requires_grad_(true);
    fn(a2, b2).sum().backward();
    expect_close(a.grad(), a2.grad(), 1e-12, 1e-12, "eager gradient of a");
    expect_close(b.grad(), b2.grad(), 1e-12, 1e-12, "eager gradient of b");
  }
  auto log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("repeats 'i' (a diagonal)"), std::string::npos) << log;
  EXPECT_TRUE(compiled.report().eager_fallback);
  EXPECT_EQ(compiled.stats().eager_calls, 3);
}

// torchvision's Swin V2 clones its qkv bias and zeroes the key third of the clone in place: the
// write's own result leads nowhere, but the clone it changed does, and the gradient must be 0 where
// it wrote. Rules cannot follow such a write; the signature runs eagerly, with eager's gradient.
TEST_F(TrainingTest, AWriteInPlaceOffTheGradientsPathRunsEagerly) {
  auto fn = [](at::Tensor bias, at::Tensor x) {
    auto copy = bias.clone();
    copy.narrow(0, 2, 2).zero_();
    return x * copy;
  };
  zenith::CompileOptions options;
  options.name = "zeroed_slice";
  auto compiled = zenith::compile(fn, options);
  for (int call = 0; call < 3; ++call) {  // fresh values each call: the capture, then the signature's runs
    auto bias = on_device(torch::randn({6}, torch::kDouble)).requires_grad_(true);
    auto x = on_device(torch::randn({4, 6}, torch::kDouble));
    auto weights = on_device(torch::randn({4, 6}, torch::kDouble));
    (compiled(bias, x) * weights).sum().backward();
    auto leaf = bias.detach().clone().requires_grad_(true);
    (fn(leaf, x) * weights).sum().backward();
    expect_close(bias.grad(), leaf.grad(), 1e-12, 1e-12, "bias gradient, call " + std::to_string(call));
    EXPECT_EQ(bias.grad().narrow(0, 2, 2).abs().max().item<double>(), 0.0) << "the zeroed slice's gradient";
  }
  EXPECT_TRUE(compiled.report().eager_fallback);
  EXPECT_NE(compiled.report().fallback_reason.find("aten::zero_ writes in place a value that needs a gradient"),
            std::string::npos)
      << compiled.report().fallback_reason;
  EXPECT_EQ(compiled.stats().training_calls, 0);
}

TEST_F(TrainingTest, DoubleBackwardRaisesAClearError) {
  auto fn = [](at::Tensor x) { return (x * x * x).sum(); };
  auto compiled = zenith::compile(fn, strict("double"));
  compiled(on_device(torch::randn({5}, torch::kDouble)).requires_grad_(true));  // the capture, other values
  auto x = on_device(torch::randn({5}, torch::kDouble)).requires_grad_(true);
  auto y = compiled(x);
  try {
    torch::autograd::grad({y}, {x}, {}, /*retain_graph=*/true, /*create_graph=*/true);
    FAIL() << "double backward did not raise";
  } catch (const std::exception& error) {
    EXPECT_NE(std::string(error.what()).find("double backward"), std::string::npos) << error.what();
  }
  auto first = torch::autograd::grad({y}, {x});  // a plain backward still works
  expect_close(first[0], 3 * x.detach() * x.detach(), 1e-12, 1e-12, "first derivative");
}

TEST_F(TrainingTest, CompileTrainingOffRunsEagerly) {
  auto options = strict("off");
  options.compile_training = false;
  auto compiled = zenith::compile([](at::Tensor x) { return x.sin(); }, options);
  auto x = on_device(torch::randn({3})).requires_grad_(true);
  compiled(x).sum().backward();
  compiled(x).sum().backward();
  EXPECT_EQ(compiled.stats().eager_calls, 2);
  EXPECT_EQ(compiled.stats().training_calls, 0);
}

TEST_F(TrainingTest, GradModeIsPartOfTheSignature) {
  // The same call under NoGradGuard and with gradients: two plans, the second an autograd node.
  auto linear = torch::nn::Linear(3, 3);
  linear->to(kDevice);
  auto fn_module = zenith::compile(linear, strict("grad-mode"));
  auto x = on_device(torch::randn({2, 3}));
  {
    torch::NoGradGuard no_grad;
    fn_module(x);
  }
  auto y = fn_module(x);
  y = fn_module(x);
  EXPECT_TRUE(y.requires_grad());
  EXPECT_TRUE(fn_module.report().backward.compiled);
  EXPECT_EQ(fn_module.stats().misses, 2);
}


TEST_F(TrainingTest, DumpHoldsTheBackward) {
  namespace fs = std::filesystem;
  auto folder = fs::temp_directory_path() / ("zenith-test-training-dump-" + std::to_string(::getpid()));
  auto options = strict("mlp-dump");
  options.dump_dir = folder.string();
  models::MlpConfig config;
  config.in = 8;
  config.hidden = {16};
  config.out = 4;
  models::Mlp mlp(config);
  mlp->to(kDevice);
  auto compiled = zenith::compile(mlp, options);
  compiled(on_device(torch::randn({3, 8}))).sum().backward();
  const auto report = compiled.report();
  ASSERT_FALSE(report.dump_path.empty());
  auto dump = zenith::dump_from_json(zenith::read_json_file(report.dump_path));
  EXPECT_TRUE(dump.report.backward.compiled);
  EXPECT_EQ(dump.report.backward.saved_values, report.backward.saved_values);
  EXPECT_FALSE(dump.backward.nodes.empty());
  EXPECT_FALSE(dump.backward_steps.empty());
  // The backward's outputs are the gradients of the parameters that require one (the MLP has
  // two linear layers: two weights, two biases).
  EXPECT_EQ(dump.backward.outputs.size(), 4u);
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(folder, ec)) fs::remove(entry.path(), ec);
  fs::remove(folder, ec);
}

}  // namespace
