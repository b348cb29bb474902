// CUDA graphs of inference plans (CompileOptions::cuda_graphs, on by default): from a signature's
// third call its plan replays as one graph. Replays match eager on fresh inputs, results a caller
// keeps are never overwritten by a later replay, a result returned twice is copied out twice, an
// input refilled in place is read anew, parameters updated in place or replaced are seen,
// arguments the forward writes are written where they lie, products of one token launched early
// read their inputs complete, the graphs of every size share one memory pool and keep none of it
// between replays, and plans a graph cannot serve (value checks, a capture that fails) run launch
// by launch. Label gpu.
#include <cstdlib>

#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <torch/script.h>
#include <torch/torch.h>

#include "training/gradient_check.h"
#include "gpu/allocator_bytes.h"
#include "gpu/two_layer_mlp.h"
#include "zenith/compile.h"

namespace {

using zenith::testing::allocated_bytes;
using zenith::testing::expect_close;
using zenith::testing::Mlp;
using zenith::testing::no_fallback;

const torch::Device kDevice(torch::kCUDA);
// Fused kernels against eager's, TF32 off: float32 roundoff through two matrix products.
constexpr double kRtol = 1e-3;
constexpr double kAtol = 1e-4;

// The test module on the device, in eval mode.
Mlp mlp_for_inference() {
  Mlp mlp;
  mlp->to(kDevice);
  mlp->eval();
  return mlp;
}

// The graph bookkeeping of `calls` calls of one signature: the first captures the plan, the second
// runs it launch by launch, the third captures the graph, and every call from the third replays it;
// nothing ran eagerly, launch by launch after the capture, or failed to capture.
void expect_replayed_from_the_third_call(const zenith::CacheStats& stats, int calls) {
  EXPECT_EQ(stats.graph_captures, 1);
  EXPECT_EQ(stats.graph_replays, calls - 2);
  EXPECT_EQ(stats.graph_plain_runs, 0);
  EXPECT_EQ(stats.graph_failures, 0);
  EXPECT_EQ(stats.eager_calls, 0);
}

class InferenceGraphs : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
    at::globalContext().setAllowTF32CuBLAS(false);
    at::globalContext().setAllowTF32CuDNN(false);
    torch::manual_seed(21);
  }
};

TEST_F(InferenceGraphs, ReplaysMatchEagerAndKeptResultsStay) {
  torch::NoGradGuard no_grad;
  auto mlp = mlp_for_inference();
  auto fast = zenith::compile(mlp, no_fallback("replays"));
  // Call 1 captures the signature, call 2 runs the plan launch by launch, call 3 captures the graph
  // and replays it, and every later call replays it on its own inputs.
  constexpr int kCalls = 7;
  std::vector<std::pair<torch::Tensor, torch::Tensor>> kept;
  for (int call = 0; call < kCalls; ++call) {
    auto x = torch::randn({8, 32}, kDevice);
    auto got = fast(x);
    auto want = mlp->forward(x);
    expect_close(got, want, kRtol, kAtol, "call " + std::to_string(call));
    kept.emplace_back(got, want);
  }
  for (std::size_t call = 0; call < kept.size(); ++call) {
    expect_close(kept[call].first, kept[call].second, kRtol, kAtol, "kept result of call " + std::to_string(call));
  }
  expect_replayed_from_the_third_call(fast.stats(), kCalls);
}

// An application that refills one input tensor and lets each result go before the next call hands
// the graph the same addresses every call: its copy nodes keep what they copy from and to
// (runtime/graph_copy_nodes.h), and still every replay reads the input's values of its own call.
TEST_F(InferenceGraphs, AnInputRefilledInPlaceAndResultsLetGoReplayTheNewValues) {
  torch::NoGradGuard no_grad;
  auto mlp = mlp_for_inference();
  auto fast = zenith::compile(mlp, no_fallback("refilled"));
  auto x = torch::empty({8, 32}, kDevice);
  constexpr int kCalls = 6;
  for (int call = 0; call < kCalls; ++call) {
    x.copy_(torch::randn({8, 32}, kDevice));
    expect_close(fast(x), mlp->forward(x), kRtol, kAtol, "call " + std::to_string(call));
  }
  expect_replayed_from_the_third_call(fast.stats(), kCalls);
}

// A forward that returns one tensor twice, or a tensor and a view of it from its start: the
// graph's two copies out read one address, and each still gets a node of its own (their capture
// destinations are kept apart, runtime/plan_graph.cpp record_output_copies); every result kept
// matches eager. Not yet run on a GPU when written (2026-11-30).
TEST_F(InferenceGraphs, AResultReturnedTwiceIsCopiedOutTwice) {
  torch::NoGradGuard no_grad;
  torch::jit::Module module("Twice");
  module.register_parameter("w", torch::randn({32, 32}, kDevice) / 8, false);
  module.define(R"(
    def forward(self, x):
        y = torch.softmax(torch.mm(torch.relu(torch.mm(x, self.w)), self.w), -1)
        return y, y, y.view(-1)
  )");
  module.eval();
  auto fast = zenith::compile(module, no_fallback("twice"));
  constexpr int kCalls = 6;
  std::vector<std::pair<c10::IValue, c10::IValue>> kept;
  for (int call = 0; call < kCalls; ++call) {
    auto x = torch::randn({8, 32}, kDevice);
    kept.emplace_back(fast({x}), module.forward({x}));
  }
  for (std::size_t call = 0; call < kept.size(); ++call) {
    const auto got = kept[call].first.toTupleRef().elements();
    const auto want = kept[call].second.toTupleRef().elements();
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t k = 0; k < got.size(); ++k) {
      expect_close(got[k].toTensor(), want[k].toTensor(), kRtol, kAtol, fmt::format("call {} result {}", call, k));
    }
  }
  expect_replayed_from_the_third_call(fast.stats(), kCalls);
}

TEST_F(InferenceGraphs, GraphsOfEverySizeShareOnePoolAndKeepNoMemoryBetweenReplays) {
  // A graph per batch size, as a decoder whose cache grows makes one per length. Every graph copies
  // its input in and its result out, so none keeps memory between replays: with eight sizes graphed
  // the memory in use is what it was with one (kept per graph, the inputs' buffers and outputs alone
  // would be 1.2 MB more). Then the sizes replay interleaved, alternating two streams without a
  // synchronization between calls, while every result is kept: the graphs reuse each other's
  // memory, so a replay that overlapped another, or overwrote a result not yet copied out, would
  // show here.
  torch::NoGradGuard no_grad;
  auto mlp = mlp_for_inference();
  auto fast = zenith::compile(mlp, no_fallback("pool"));
  const std::vector<std::int64_t> batches = {512, 640, 768, 896, 1024, 1152, 1280, 1408};
  auto graph_batch = [&](std::int64_t batch) {
    // Enough calls for a plan of its own (captured, run, graphed) or an instance of a symbolic one.
    for (int call = 0; call < 4; ++call) {
      auto x = torch::randn({batch, 32}, kDevice);
      expect_close(fast(x), mlp->forward(x), kRtol, kAtol, fmt::format("batch {}, call {}", batch, call));
    }
  };
  graph_batch(batches.front());
  const auto with_one = allocated_bytes();
  for (std::size_t i = 1; i < batches.size(); ++i) graph_batch(batches[i]);
  const auto with_all = allocated_bytes();
  ASSERT_EQ(fast.stats().graph_captures, static_cast<std::int64_t>(batches.size())) << fast.report().to_string();
  // Below one graph's input and output at the smallest size (512 x (32 + 16) floats).
  EXPECT_LT(with_all - with_one, 512 * (32 + 16) * 4) << "the graphs keep memory between replays";

  const auto replays_before = fast.stats().graph_replays;
  std::vector<c10::cuda::CUDAStream> streams = {c10::cuda::getStreamFromPool(), c10::cuda::getStreamFromPool()};
  std::vector<std::pair<torch::Tensor, torch::Tensor>> kept;
  std::vector<std::string> what;
  for (int round = 0; round < 3; ++round) {
    for (std::size_t i = 0; i < batches.size(); ++i) {
      c10::cuda::CUDAStreamGuard on(streams[(i + round) % 2]);
      auto x = torch::randn({batches[i], 32}, kDevice);
      kept.emplace_back(fast(x), mlp->forward(x));
      what.push_back(fmt::format("round {}, batch {}", round, batches[i]));
    }
  }
  torch::cuda::synchronize();
  for (std::size_t k = 0; k < kept.size(); ++k) expect_close(kept[k].first, kept[k].second, kRtol, kAtol, what[k]);
  EXPECT_EQ(fast.stats().graph_replays - replays_before, static_cast<std::int64_t>(kept.size()));
  EXPECT_EQ(fast.stats().graph_captures, static_cast<std::int64_t>(batches.size()));
  EXPECT_EQ(fast.stats().graph_plain_runs, 0);
  EXPECT_EQ(fast.stats().eager_calls, 0);
}

TEST_F(InferenceGraphs, ATokenSlicedFromALongerTensorReplaysOneGraph) {
  // A generation loop's input sliced from a longer tensor: [1, 1, 32] out of [1, n, 32], whose
  // first stride (32n) changes with n though no element moves. One signature, one graph, whose
  // buffer (laid out as the capture's slice) takes each call's values.
  torch::NoGradGuard no_grad;
  auto mlp = mlp_for_inference();
  auto fast = zenith::compile(mlp, no_fallback("sliced"));
  constexpr int kCalls = 6;
  for (int call = 0; call < kCalls; ++call) {
    const std::int64_t n = 3 + 5 * call;
    auto x = torch::randn({1, n, 32}, kDevice).narrow(1, n - 1, 1);
    expect_close(fast(x), mlp->forward(x), kRtol, kAtol, fmt::format("a column of [1, {}, 32]", n));
  }
  EXPECT_EQ(fast.stats().misses, 1);
  EXPECT_EQ(fast.stats().graph_captures, 1);
  EXPECT_EQ(fast.stats().graph_replays, kCalls - 2);
  EXPECT_EQ(fast.stats().graph_plain_runs, 0);
}

TEST_F(InferenceGraphs, ParametersUpdatedInPlaceOrReplacedAreSeen) {
  torch::NoGradGuard no_grad;
  auto mlp = mlp_for_inference();
  auto fast = zenith::compile(mlp, no_fallback("parameters"));
  auto check = [&](const std::string& what) {
    auto x = torch::randn({8, 32}, kDevice);
    expect_close(fast(x), mlp->forward(x), kRtol, kAtol, what);
  };
  for (int call = 0; call < 4; ++call) check("before, call " + std::to_string(call));
  ASSERT_EQ(fast.stats().graph_captures, 1);
  for (auto& p : mlp->parameters()) p.mul_(0.5);  // where the graph reads them
  for (int call = 0; call < 2; ++call) check("updated in place, call " + std::to_string(call));
  for (auto& p : mlp->parameters()) p.set_data(torch::randn_like(p));  // new memory
  for (int call = 0; call < 5; ++call) check("replaced, call " + std::to_string(call));
  EXPECT_GE(fast.stats().graph_replays, 4);
  const auto replays = fast.stats().graph_replays;
  // Other tensor objects in the parameters' places (a submodule replaced, the C++ frontend's way):
  // a new state snapshot, which the call's kept tensor vector (runtime/call_tensor_buffers.h) must
  // follow, or the graph would read the old tensors, still alive there, at the addresses it was
  // captured with.
  mlp->a = mlp->replace_module("a", torch::nn::Linear(32, 64));
  mlp->a->to(kDevice);
  for (int call = 0; call < 5; ++call) check("a submodule replaced, call " + std::to_string(call));
  EXPECT_GT(fast.stats().graph_replays, replays) << "the new parameters were read by a replay too";
}

// A decode step's chain at one token: normalized rows (a row kernel), a product of one row (the
// matrix-vector kernel) of two sibling weights the plan keeps concatenated, GELU, a product and the
// residual, six layers, each kernel reading what the one before it wrote. In the graph the products
// start before the kernel before them ends and load their weights early (backends/cuda/
// programmatic_launch.h, runtime/unwritten_inputs.h): a product reading its input before the wait
// would see the last call's row or a half-written one (fresh inputs every call make either an
// error of the values' own size), and a weight updated in place between calls must be read anew.
struct TokenChainImpl : torch::nn::Module {
  TokenChainImpl() {
    auto linear = [] { return torch::nn::Linear(torch::nn::LinearOptions(256, 256).bias(false)); };
    for (int i = 0; i < 6; ++i) {
      gates.push_back(register_module("gate" + std::to_string(i), linear()));
      ups.push_back(register_module("up" + std::to_string(i), linear()));
    }
  }
  torch::Tensor forward(torch::Tensor x) {
    torch::Tensor h = x;
    for (std::size_t i = 0; i < gates.size(); ++i) {
      auto n = h * torch::rsqrt((h * h).mean(-1, true) + 1e-6);
      h = h + torch::gelu(gates[i]->forward(n), "tanh") * ups[i]->forward(n);
    }
    return h;
  }
  // Sibling products of one input: the plan reads their weights concatenated, a value it keeps.
  std::vector<torch::nn::Linear> gates, ups;
};
TORCH_MODULE(TokenChain);

TEST_F(InferenceGraphs, ProductsOfOneTokenStartEarlyAndReadTheirInputsComplete) {
  torch::NoGradGuard no_grad;
  TokenChain chain;
  chain->to(kDevice);
  chain->eval();
  auto fast = zenith::compile(chain, no_fallback("token chain"));
  auto check = [&](const std::string& what) {
    auto x = torch::randn({1, 1, 256}, kDevice);
    expect_close(fast(x), chain->forward(x), kRtol, kAtol, what);
  };
  for (int call = 0; call < 6; ++call) check("call " + std::to_string(call));
  EXPECT_EQ(fast.stats().graph_captures, 1);
  EXPECT_GE(fast.stats().graph_replays, 3);
  for (auto& p : chain->parameters()) p.mul_(-0.5);  // where the graph's early loads read them
  for (int call = 0; call < 3; ++call) check("weights updated in place, call " + std::to_string(call));
  EXPECT_EQ(fast.stats().graph_captures, 1);
  EXPECT_GE(fast.stats().graph_replays, 6);
}

// A product whose weight's first row is also the call's argument, which the forward scales in
// place right before the product: eager multiplies by the scaled row. Such a call must not read
// the weight as the plan kept it, nor load it early in a graph before the scaling has finished.
// The linear's transposed weight is a kept value derived from the parameter, so such a call runs
// every step in order, launch by launch (runtime/derived_values.h, shares_memory_with_arguments);
// calls with an argument of their own between them still replay the plan's graph. Where no kept
// value reads the shared memory, the graph would be recorded with no input read early
// (runtime/unwritten_inputs.h, read_only_memory_shared; unit-tested on the CPU).
struct ScaledInPlaceImpl : torch::nn::Module {
  ScaledInPlaceImpl() : lin(register_module("lin", torch::nn::Linear(torch::nn::LinearOptions(256, 256).bias(false)))) {}
  torch::Tensor forward(torch::Tensor x) {
    x.mul_(-2);
    return lin->forward(x);
  }
  torch::nn::Linear lin;
};
TORCH_MODULE(ScaledInPlace);

TEST_F(InferenceGraphs, AWeightTheCallPassesAndTheForwardWritesIsReadAfterTheWrite) {
  torch::NoGradGuard no_grad;
  ScaledInPlace model;
  model->to(kDevice);
  model->eval();
  auto fast = zenith::compile(model, no_fallback("weight as argument"));
  auto row = model->lin->weight.detach().narrow(0, 0, 1);  // [1, 256], the same memory every call
  std::int64_t replays_before = 0;
  for (int call = 0; call < 8; ++call) {
    const std::string what = "call " + std::to_string(call);
    auto fresh = torch::randn({1, 256}, kDevice);
    if (call % 2 == 1) {
      // An argument of its own: the forward scales it, not the weight.
      auto argument = fresh.clone();
      expect_close(fast(argument), model->forward(fresh), kRtol, kAtol, what);
      continue;
    }
    row.copy_(fresh);
    replays_before = fast.stats().graph_replays;
    auto got = fast(row);
    EXPECT_EQ(fast.stats().graph_replays, replays_before) << what << ": a call through the weight's memory replayed";
    auto weight_after = model->lin->weight.clone();
    row.copy_(fresh);
    auto want = model->forward(row);
    expect_close(got, want, kRtol, kAtol, what);
    EXPECT_TRUE(torch::equal(weight_after, model->lin->weight)) << what << ": the row written";
  }
  EXPECT_GE(fast.stats().graph_replays, 2) << "the calls with arguments of their own replay the graph";
}

// An application that records a CUDA graph of its own around a compiled call, after warm-up calls
// as PyTorch asks of any capture: the plan's launches are what its graph records (no graph of ours
// is replayed or recorded inside it), and each replay of the application's graph computes the
// result of what its input holds then.
TEST_F(InferenceGraphs, AnApplicationsOwnGraphAroundACallRecordsThePlansLaunches) {
  torch::NoGradGuard no_grad;
  auto mlp = mlp_for_inference();
  auto fast = zenith::compile(mlp, no_fallback("the application's graph"));
  auto x = torch::randn({8, 32}, kDevice);
  auto stream = c10::cuda::getStreamFromPool(false, kDevice.index());
  torch::Tensor y;
  at::cuda::CUDAGraph application_graph;
  {
    c10::cuda::CUDAStreamGuard on(stream);
    for (int call = 0; call < 4; ++call) fast(x);  // the plan made, its own graph recorded and replayed
    stream.synchronize();
    ASSERT_EQ(fast.stats().graph_captures, 1);
    const auto replays = fast.stats().graph_replays;
    application_graph.capture_begin();
    y = fast(x);
    application_graph.capture_end();
    EXPECT_EQ(fast.stats().graph_captures, 1) << "no graph of ours recorded inside the application's";
    EXPECT_EQ(fast.stats().graph_replays, replays) << "no graph of ours replayed inside the application's";
  }
  for (int replay = 0; replay < 3; ++replay) {
    x.copy_(torch::randn({8, 32}, kDevice));
    application_graph.replay();
    torch::cuda::synchronize();
    expect_close(y, mlp->forward(x), kRtol, kAtol, "the application's replay " + std::to_string(replay));
  }
  // Outside the application's capture the plan's own graph serves the calls again.
  const auto replays = fast.stats().graph_replays;
  auto fresh = torch::randn({8, 32}, kDevice);
  expect_close(fast(fresh), mlp->forward(fresh), kRtol, kAtol, "a call after the application's graph");
  EXPECT_EQ(fast.stats().graph_replays, replays + 1);
}

TEST_F(InferenceGraphs, OffByOptionRunsLaunchByLaunch) {
  torch::NoGradGuard no_grad;
  Mlp mlp;
  mlp->to(kDevice);
  auto o = no_fallback("off");
  o.cuda_graphs = false;
  auto fast = zenith::compile(mlp, o);
  for (int call = 0; call < 4; ++call) {
    auto x = torch::randn({8, 32}, kDevice);
    expect_close(fast(x), mlp->forward(x), kRtol, kAtol, "call " + std::to_string(call));
  }
  EXPECT_EQ(fast.stats().graph_captures, 0);
  EXPECT_EQ(fast.stats().graph_replays, 0);
}

TEST_F(InferenceGraphs, APlanOfOneLaunchIsNotGraphed) {
  // One fused kernel: a graph would only add the copies of x in and of the result out.
  torch::NoGradGuard no_grad;
  auto fn = [](torch::Tensor x, torch::Tensor a) { return torch::gelu(x * a + 1); };
  auto fast = zenith::compile(fn, no_fallback("one launch"));
  for (int call = 0; call < 4; ++call) {
    auto x = torch::randn({1024}, kDevice), a = torch::randn({1024}, kDevice);
    expect_close(fast(x, a), fn(x, a), kRtol, kAtol, "call " + std::to_string(call));
  }
  EXPECT_EQ(fast.report().groups, 1) << fast.report().to_string();
  EXPECT_EQ(fast.stats().graph_captures, 0);
  EXPECT_EQ(fast.stats().graph_failures, 0);
}

TEST_F(InferenceGraphs, APlanWithValueChecksRunsLaunchByLaunch) {
  torch::NoGradGuard no_grad;
  auto fn = [](torch::Tensor x, torch::Tensor flag) {
    auto h = x * 2;
    return flag.sum().item<std::int64_t>() > 0 ? h.relu() : h.sigmoid();
  };
  auto o = no_fallback("checks");
  o.fallback_to_eager = true;  // a call with the other flag runs eagerly
  auto fast = zenith::compile(fn, o);
  auto on = torch::ones({2}, torch::TensorOptions().dtype(torch::kLong).device(kDevice));
  for (int call = 0; call < 4; ++call) {
    auto x = torch::randn({16}, kDevice);
    expect_close(fast(x, on), fn(x, on), kRtol, kAtol, "call " + std::to_string(call));
  }
  auto x = torch::randn({16}, kDevice);
  expect_close(fast(x, -on), fn(x, -on), kRtol, kAtol, "the other flag");
  EXPECT_EQ(fast.report().value_checks.size(), 1u);
  EXPECT_EQ(fast.stats().value_check_failures, 1);
  EXPECT_EQ(fast.stats().graph_captures, 0);
}

TEST_F(InferenceGraphs, ArgumentsTheForwardWritesAreReadWhereTheyLie) {
  // A replay reads the call's tensors from copies in the graph's buffers, except those the plan
  // writes in place (a static KV cache): those it reads where they lie, so the write lands in the
  // caller's tensor. Called on one tensor refilled between calls (the graph replays), then on
  // another (that call runs launch by launch).
  torch::NoGradGuard no_grad;
  auto writes = [](torch::Tensor x, torch::Tensor y) {
    x.mul_(y);
    return (x + y).exp();
  };
  auto writing = zenith::compile(writes, no_fallback("writes"));
  auto mine = torch::empty({16}, kDevice), theirs = torch::empty({16}, kDevice);
  constexpr int kCalls = 5;
  for (int call = 0; call < kCalls; ++call) {
    auto x = torch::randn({16}, kDevice), y = torch::randn({16}, kDevice);
    mine.copy_(x);
    theirs.copy_(x);
    expect_close(writing(mine, y), writes(theirs, y), kRtol, kAtol, "writes, call " + std::to_string(call));
    expect_close(mine, theirs, kRtol, kAtol, "the argument written, call " + std::to_string(call));
  }
  EXPECT_EQ(writing.stats().graph_captures, 1);
  EXPECT_EQ(writing.stats().graph_replays, kCalls - 2);
  auto elsewhere = torch::randn({16}, kDevice), y = torch::randn({16}, kDevice);
  auto copy = elsewhere.clone();
  const auto before = mine.clone();
  expect_close(writing(elsewhere, y), writes(copy, y), kRtol, kAtol, "writes, another tensor");
  expect_close(elsewhere, copy, kRtol, kAtol, "the other tensor written");
  EXPECT_TRUE(torch::equal(mine, before)) << "the tensor the graph was captured with was written";
  EXPECT_EQ(writing.stats().graph_plain_runs, 1);
}

TEST_F(InferenceGraphs, ForwardsThatReturnTheirArgumentsRunLaunchByLaunch) {
  // A returned view of an argument would not alias it if the graph read a copy.
  torch::NoGradGuard no_grad;
  auto views = [](torch::Tensor x) { return x.view({4, 4}).t(); };
  auto view_options = no_fallback("views");
  view_options.fallback_to_eager = true;  // a plan of views alone launches nothing, and may run eagerly
  auto viewing = zenith::compile(views, view_options);
  for (int call = 0; call < 4; ++call) {
    auto x = torch::randn({16}, kDevice);
    auto viewed = viewing(x);
    EXPECT_EQ(viewed.data_ptr(), x.data_ptr()) << "a view of the argument, as eager returns, call " << call;
  }
  EXPECT_EQ(viewing.stats().graph_captures, 0);
}

TEST_F(InferenceGraphs, AFailedCaptureRunsLaunchByLaunch) {
  // hostsync takes the relu, claims to be graph-safe and synchronizes its stream: CUDA refuses that
  // inside a capture.
  torch::NoGradGuard no_grad;
  auto o = no_fallback("hostsync");
  o.plugin_paths = {ZENITH_HOSTSYNC_PLUGIN};
  o.backends = {"hostsync", "torch_gpu"};
  torch::nn::Linear a(16, 32), b(64, 8);
  a->to(kDevice);
  b->to(kDevice);
  // The lambda's modules are constants of its trace, which must not need gradients.
  for (auto* module : {a.ptr().get(), b.ptr().get()}) {
    for (auto& p : module->parameters()) p.requires_grad_(false);
  }
  auto fn = [&](torch::Tensor x) {
    auto h = a->forward(x);
    return b->forward(torch::relu(torch::cat({h, h}, 1)));
  };
  auto fast = zenith::compile(fn, o);
  for (int call = 0; call < 5; ++call) {
    auto x = torch::randn({8, 16}, kDevice);
    expect_close(fast(x), fn(x), kRtol, kAtol, "call " + std::to_string(call));
  }
  EXPECT_EQ(fast.report().nodes_per_backend.count("hostsync"), 1u) << fast.report().to_string();
  EXPECT_EQ(fast.stats().graph_failures, 1);
  EXPECT_EQ(fast.stats().graph_replays, 0);
  auto y = torch::randn({64}, kDevice);
  EXPECT_TRUE(torch::equal(torch::relu(y).cpu(), torch::relu(y.cpu()))) << "the failed capture left no error behind";
}

}  // namespace
