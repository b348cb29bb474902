// CUDA graphs of compiled training plans (CompileOptions::cuda_graphs): replays match eager step
// after step, and every case where a replay would be wrong runs launch by launch instead: outputs
// of the previous call still held, parameters that moved, a capture that fails. Label gpu.
#include <filesystem>

#include <unistd.h>

#include <c10/core/MemoryFormat.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/dump.h"

#include "models/cnn.h"
#include "training/gradient_check.h"
#include "zenith/compile.h"

namespace {

using zenith::testing::expect_close;
namespace models = zenith::models;

const torch::Device kDevice(torch::kCUDA);
// As test_training's GPU build: cuDNN's algorithms against Zenith's kernels, TF32 off.
constexpr double kRtol = 1e-3;
constexpr double kAtol = 1e-4;

class TrainingGraphs : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
    at::globalContext().setAllowTF32CuBLAS(false);
    at::globalContext().setAllowTF32CuDNN(false);
    torch::manual_seed(3);
  }
};

struct CnnLossImpl : torch::nn::Module {
  CnnLossImpl() : net(register_module("net", models::Cnn(models::CnnConfig::small()))) {}
  torch::Tensor forward(torch::Tensor images, torch::Tensor labels) {
    return torch::cross_entropy_loss(net->forward(images), labels);
  }
  models::Cnn net;
};
TORCH_MODULE(CnnLoss);

// A two-layer perceptron whose relu the hostsync test plugin can take: between a concatenation
// and a matrix product, so that no fusion takes it into a group of several ops.
struct ReluMlpImpl : torch::nn::Module {
  ReluMlpImpl() : a(register_module("a", torch::nn::Linear(16, 32))), b(register_module("b", torch::nn::Linear(64, 8))) {}
  torch::Tensor forward(torch::Tensor x) {
    auto h = a->forward(x);
    return b->forward(torch::relu(torch::cat({h, h}, 1))).pow(2).mean();
  }
  torch::nn::Linear a, b;
};
TORCH_MODULE(ReluMlp);

template <typename Module>
std::pair<Module, Module> twins() {
  torch::manual_seed(11);
  Module a;
  torch::manual_seed(11);
  Module b;
  a->to(kDevice);
  b->to(kDevice);
  return {a, b};
}

void expect_same_gradients(torch::nn::Module& eager, torch::nn::Module& compiled, const std::string& what) {
  auto got = compiled.named_parameters(true);
  for (const auto& item : eager.named_parameters(true)) {
    expect_close(got[item.key()].grad(), item.value().grad(), kRtol, kAtol, what + ": " + item.key());
  }
}

zenith::CompileOptions options(const std::string& name) {
  zenith::CompileOptions o;
  o.name = name;
  o.fallback_to_eager = false;
  return o;
}

struct Batch {
  at::Tensor images = torch::randn({4, 3, 32, 32}, kDevice);
  at::Tensor labels = torch::randint(10, {4}, torch::TensorOptions().dtype(torch::kLong).device(kDevice));
};

// One optimizer step of both twins on a fresh batch; compares losses and gradients.
template <typename Compiled>
void step_both(CnnLoss& eager, CnnLoss& twin, Compiled& compiled, torch::optim::Optimizer& eager_opt,
               torch::optim::Optimizer& twin_opt, const std::string& what) {
  Batch batch;
  eager_opt.zero_grad();
  twin_opt.zero_grad();
  auto want = eager->forward(batch.images, batch.labels);
  auto got = compiled(batch.images, batch.labels);
  want.backward();
  got.backward();
  expect_close(got.detach(), want.detach(), kRtol, kAtol, what + ": loss");
  expect_same_gradients(*eager, *twin, what);
  eager_opt.step();
  twin_opt.step();
}

TEST_F(TrainingGraphs, ReplaysMatchEagerStepAfterStep) {
  auto [eager, twin] = twins<CnnLoss>();
  auto compiled = zenith::compile(twin, options("replays"));
  torch::optim::AdamW eager_opt(eager->parameters(), torch::optim::AdamWOptions(1e-3));
  torch::optim::AdamW twin_opt(twin->parameters(), torch::optim::AdamWOptions(1e-3));
  // Call 1 captures the signature, call 2 runs the plans launch by launch, call 3 captures the
  // graphs, and from then on every call replays them, on new batches and updated weights.
  for (int step = 0; step < 6; ++step) step_both(eager, twin, compiled, eager_opt, twin_opt, "step " + std::to_string(step));
  const auto stats = compiled.stats();
  EXPECT_EQ(stats.graph_captures, 2);     // the forward and the backward
  EXPECT_EQ(stats.graph_replays, 2 * 4);  // calls 3 to 6, both directions
  EXPECT_EQ(stats.graph_plain_runs, 0);
  EXPECT_EQ(stats.graph_failures, 0);
}

// Convolutions and channels-last copies in the optimized forward of a CNN step's dump.
std::pair<int, int> convolutions_and_channels_last_copies(bool channels_last) {
  namespace fs = std::filesystem;
  auto folder = fs::temp_directory_path() /
                ("zenith-test-channels-last-" + std::to_string(::getpid()) + (channels_last ? "-on" : "-off"));
  auto o = options("channels last");
  o.dump_dir = folder.string();
  o.channels_last = channels_last;
  auto [eager, twin] = twins<CnnLoss>();
  auto compiled = zenith::compile(twin, o);
  Batch batch;
  compiled(batch.images, batch.labels).backward();
  const auto path = compiled.report().dump_path;
  EXPECT_FALSE(path.empty());
  auto dump = zenith::dump_from_json(zenith::read_json_file(path));
  int copies = 0, convolutions = 0;
  for (const auto& node : dump.optimized.nodes) {
    convolutions += node.op == "aten::_convolution";
    if (node.op == "aten::contiguous" &&
        std::get<std::int64_t>(node.arg("memory_format")->value) == static_cast<std::int64_t>(c10::MemoryFormat::ChannelsLast)) {
      ++copies;
    }
  }
  std::error_code ec;  // not remove_all: the copy libtorch exports is broken
  for (const auto& entry : fs::directory_iterator(folder, ec)) fs::remove(entry.path(), ec);
  fs::remove(folder, ec);
  return {convolutions, copies};
}

TEST_F(TrainingGraphs, ConvolutionsRunChannelsLastUnlessTurnedOff) {
  // passes/channels_last_convolutions.cpp: on CUDA the convolutions read channels-last copies of their
  // input and weight (the gradient tests above run with it, the default).
  auto [convolutions, copies] = convolutions_and_channels_last_copies(true);
  EXPECT_GT(convolutions, 0);
  EXPECT_GT(copies, convolutions);  // every weight, and the convolutions' inputs
  auto [convolutions_off, copies_off] = convolutions_and_channels_last_copies(false);
  EXPECT_EQ(convolutions_off, convolutions);
  EXPECT_EQ(copies_off, 0);
}

TEST_F(TrainingGraphs, OffRunsLaunchByLaunch) {
  auto [eager, twin] = twins<CnnLoss>();
  auto o = options("off");
  o.cuda_graphs = false;
  auto compiled = zenith::compile(twin, o);
  torch::optim::SGD eager_opt(eager->parameters(), torch::optim::SGDOptions(0.01));
  torch::optim::SGD twin_opt(twin->parameters(), torch::optim::SGDOptions(0.01));
  for (int step = 0; step < 4; ++step) step_both(eager, twin, compiled, eager_opt, twin_opt, "off");
  EXPECT_EQ(compiled.stats().graph_captures, 0);
  EXPECT_EQ(compiled.stats().graph_replays, 0);
  EXPECT_EQ(compiled.stats().training_calls, 3);
}

TEST_F(TrainingGraphs, AccumulatedGradientsHeldInGradRunLaunchByLaunch) {
  // No zero_grad between steps: the gradients a replay handed to .grad are still there, so the next
  // backward must not overwrite them; it runs launch by launch and accumulates into them.
  auto [eager, twin] = twins<CnnLoss>();
  auto compiled = zenith::compile(twin, options("accumulate"));
  for (int step = 0; step < 5; ++step) {
    Batch batch;  // fresh values at every call of the signature
    if (step < 3) {
      eager->zero_grad();
      twin->zero_grad();
    }
    eager->forward(batch.images, batch.labels).backward();
    compiled(batch.images, batch.labels).backward();
    expect_same_gradients(*eager, *twin, "accumulated step " + std::to_string(step));
  }
  EXPECT_GT(compiled.stats().graph_plain_runs, 0);
}

TEST_F(TrainingGraphs, TwoForwardsBeforeOneBackwardAreBothKept) {
  // The first call's saved values wait for its backward while the second call runs: the second
  // must not overwrite them.
  auto [eager, twin] = twins<CnnLoss>();
  auto compiled = zenith::compile(twin, options("two forwards"));
  for (int step = 0; step < 5; ++step) {
    Batch first, second;
    eager->zero_grad();
    twin->zero_grad();
    auto want = eager->forward(first.images, first.labels) + eager->forward(second.images, second.labels);
    auto got_first = compiled(first.images, first.labels);
    auto got_second = compiled(second.images, second.labels);
    want.backward();
    (got_first + got_second).backward();
    expect_same_gradients(*eager, *twin, "two forwards, step " + std::to_string(step));
  }
  EXPECT_GT(compiled.stats().graph_plain_runs, 0);
}

TEST_F(TrainingGraphs, MovedParametersAreFollowed) {
  auto [eager, twin] = twins<CnnLoss>();
  auto compiled = zenith::compile(twin, options("moved"));
  torch::optim::SGD eager_opt(eager->parameters(), torch::optim::SGDOptions(0.01));
  for (int step = 0; step < 8; ++step) {
    if (step == 4) {
      // New tensors for every parameter, same values: the captured addresses are stale.
      torch::NoGradGuard no_grad;
      for (auto& p : twin->parameters()) p.set_data(p.detach().clone());
    }
    // The optimizer holds the parameters it was given; make a new one over the current tensors.
    torch::optim::SGD twin_opt(twin->parameters(), torch::optim::SGDOptions(0.01));
    step_both(eager, twin, compiled, eager_opt, twin_opt, "moved, step " + std::to_string(step));
  }
  const auto stats = compiled.stats();
  EXPECT_GT(stats.graph_plain_runs, 0);
  EXPECT_GT(stats.graph_captures, 2);  // captured again at the new addresses
  EXPECT_GT(stats.graph_replays, 0);
}

struct DropoutSumImpl : torch::nn::Module {
  DropoutSumImpl() : linear(register_module("linear", torch::nn::Linear(64, 64))) {}
  torch::Tensor forward(torch::Tensor x) { return torch::dropout(linear->forward(x), 0.5, is_training()).sum(); }
  torch::nn::Linear linear;
};
TORCH_MODULE(DropoutSum);

TEST_F(TrainingGraphs, ExpandedArgumentsAreNotCopiedIntoTheGraph) {
  // An argument whose elements share memory cannot be copied into a buffer of the graph's own: the
  // plan runs launch by launch.
  auto [eager, twin] = twins<CnnLoss>();
  auto compiled = zenith::compile(twin, options("expanded"));
  for (int step = 0; step < 4; ++step) {
    // Fresh values at every call, expanded alike: the same signature.
    auto images = torch::randn({1, 3, 32, 32}, kDevice).expand({4, 3, 32, 32});
    auto labels = torch::randint(10, {4}, torch::TensorOptions().dtype(torch::kLong).device(kDevice));
    eager->zero_grad();
    twin->zero_grad();
    eager->forward(images, labels).backward();
    compiled(images, labels).backward();
    expect_same_gradients(*eager, *twin, "expanded, step " + std::to_string(step));
  }
  EXPECT_EQ(compiled.stats().graph_replays, 0);
  EXPECT_EQ(compiled.stats().training_calls, 3);
}

TEST_F(TrainingGraphs, DropoutReplaysAreReproducibleWithASeed) {
  DropoutSum net;
  net->to(kDevice);
  auto compiled = zenith::compile(net, options("dropout"));
  auto x = torch::randn({32, 64}, kDevice);
  for (int call = 0; call < 3; ++call) compiled(x).backward();  // capture, warm-up, graph capture
  ASSERT_EQ(compiled.stats().graph_captures, 2);
  torch::manual_seed(5);
  const double first = compiled(x).item<double>();
  const double fresh = compiled(x).item<double>();
  torch::manual_seed(5);
  const double again = compiled(x).item<double>();
  EXPECT_EQ(first, again) << "the same seed must give the same dropout masks on replay";
  EXPECT_NE(first, fresh) << "each replay must draw new masks";
  EXPECT_GE(compiled.stats().graph_replays, 3);
}

TEST_F(TrainingGraphs, FailedCaptureRunsLaunchByLaunch) {
  // hostsync takes the relu, claims to be graph-safe and synchronizes its stream: CUDA refuses that
  // inside a capture, as it does a PyTorch op that synchronizes.
  auto [eager, twin] = twins<ReluMlp>();
  auto o = options("hostsync");
  o.plugin_paths = {ZENITH_HOSTSYNC_PLUGIN};
  o.backends = {"hostsync", "torch_gpu"};
  auto compiled = zenith::compile(twin, o);
  for (int step = 0; step < 5; ++step) {
    auto x = torch::randn({8, 16}, kDevice);
    eager->zero_grad();
    twin->zero_grad();
    auto want = eager->forward(x);
    auto got = compiled(x);
    want.backward();
    got.backward();
    expect_close(got.detach(), want.detach(), kRtol, kAtol, "hostsync loss");
    expect_same_gradients(*eager, *twin, "hostsync step " + std::to_string(step));
  }
  EXPECT_EQ(compiled.report().nodes_per_backend.count("hostsync"), 1u) << compiled.report().to_string();
  EXPECT_GE(compiled.stats().graph_failures, 1);  // the forward's capture, at least
  EXPECT_EQ(compiled.stats().graph_replays, 0);   // and the backward reads what a plain forward saved
  // A good CUDA call after the failure: the failed capture left no error behind.
  auto y = torch::randn({64}, kDevice);
  EXPECT_TRUE(torch::equal(torch::relu(y).cpu(), torch::relu(y.cpu())));
}

}  // namespace
