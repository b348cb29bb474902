// Dynamic shapes on the CPU, by counts: a symbolic plan serves a sweep of sizes without recapture,
// matches eager at every size, and refuses (with one recapture each) what it cannot serve. With
// dynamic shapes off, every new signature is exactly one recapture. Every size is called twice, on
// fresh values each time, so that each concrete signature is compared with eager on two inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <vector>

#include <torch/torch.h>

#include "common/fresh_inputs.h"
#include "common_relative_error.h"
#include "models/bert.h"
#include "models/llama.h"
#include "zenith/compile.h"

namespace zenith {
namespace {

using testing::call_name;
using testing::fresh_like;
using testing::relative_error;
// A linear layer and the zoo models on the CPU plugin: the same ATen kernels as eager, in the same
// order; a matrix product over other sizes or alignments may sum in another order (ulps of partial
// sums). A stale or wrong value is off by order one.
constexpr double kTolerance = 1e-5;
// Calls per size in the sweeps: the first on the size (a capture, an instantiation or a hit), then
// one more on fresh values of the same signature.
constexpr int kCallsPerSize = 2;

CompileOptions options_with(DynamicShapes mode, std::vector<DynamicDim> dims = {}) {
  CompileOptions options;
  options.fallback_to_eager = false;
  options.dynamic_shapes = mode;
  options.dynamic_dims = std::move(dims);
  return options;
}

struct LinearReluImpl : torch::nn::Module {
  torch::nn::Linear linear{nullptr};
  LinearReluImpl() { linear = register_module("linear", torch::nn::Linear(32, 48)); }
  torch::Tensor forward(torch::Tensor x) { return torch::relu(linear(x)); }
};
TORCH_MODULE(LinearRelu);

// The torture test at CPU size: batch 4, a fresh sequence length from 10..100 at every call.
std::vector<std::int64_t> random_lengths(int count, unsigned seed, std::int64_t longest = 100) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::int64_t> length(10, longest);
  std::vector<std::int64_t> lengths;
  for (int i = 0; i < count; ++i) lengths.push_back(length(rng));
  return lengths;
}

TEST(DynamicShapes, DeclaredDimensionServesASweepWithoutRecapture) {
  torch::manual_seed(1);
  torch::NoGradGuard no_grad;
  LinearRelu model;
  auto fast = compile(model, options_with(DynamicShapes::Auto, {{0, 1}}));
  std::set<std::int64_t> distinct;
  for (auto length : random_lengths(40, 1)) {
    distinct.insert(length);
    for (int call = 0; call < kCallsPerSize; ++call) {
      auto x = torch::randn({4, length, 32});
      ASSERT_LE(relative_error(fast(x), model->forward(x)), kTolerance) << "length " << length << ", call " << call;
    }
  }
  auto stats = fast.stats();
  EXPECT_EQ(stats.misses, 1);
  EXPECT_EQ(stats.recaptures, 0);
  EXPECT_EQ(stats.symbolic_plans, 1);
  // Every other call is a hit or an instantiation (again, when the plan cache evicted its length).
  EXPECT_GE(stats.instantiations, static_cast<std::int64_t>(distinct.size()) - 1);
  EXPECT_EQ(stats.hits + stats.instantiations, 40 * kCallsPerSize - 1);
  EXPECT_EQ(fast.report().symbolic, "argument 0 dim 1");
  EXPECT_TRUE(fast.report().static_reason.empty()) << fast.report().static_reason;
  EXPECT_NE(fast.report().to_string().find("symbolic: argument 0 dim 1"), std::string::npos);
}

TEST(DynamicShapes, AutomaticModeMakesTheVaryingDimensionSymbolicAfterOneRecapture) {
  torch::manual_seed(2);
  torch::NoGradGuard no_grad;
  LinearRelu model;
  auto fast = compile(model, options_with(DynamicShapes::Auto));
  auto lengths = random_lengths(40, 2);
  lengths.insert(lengths.begin(), {17, 23});  // two distinct lengths first
  for (auto length : lengths) {
    for (int call = 0; call < kCallsPerSize; ++call) {
      auto x = torch::randn({4, length, 32});
      ASSERT_LE(relative_error(fast(x), model->forward(x)), kTolerance) << "length " << length << ", call " << call;
    }
  }
  auto stats = fast.stats();
  EXPECT_EQ(stats.misses, 2);
  EXPECT_EQ(stats.recaptures, 1);
  EXPECT_EQ(stats.symbolic_plans, 1);
  // Only the sequence changed: the batch stays exact, and a new batch is a new capture.
  for (int call = 0; call < kCallsPerSize; ++call) {
    auto x = torch::randn({6, 30, 32});
    EXPECT_LE(relative_error(fast(x), model->forward(x)), kTolerance) << "batch 6, call " << call;
  }
  EXPECT_EQ(fast.stats().recaptures, 2);
}

// A forward that keeps a weak reference to each of its results and, whenever it starts, counts the
// earlier ones still alive somewhere; it also notes the length (dim 1) of each input it ran on.
struct ResultWatcherImpl : torch::nn::Module {
  torch::nn::Linear linear{nullptr};
  std::vector<c10::weak_intrusive_ptr<c10::TensorImpl>> results;
  std::vector<std::int64_t> lengths;
  std::size_t most_alive_at_start = 0;
  ResultWatcherImpl() { linear = register_module("linear", torch::nn::Linear(32, 48)); }
  torch::Tensor forward(torch::Tensor x) {
    std::size_t alive = 0;
    for (const auto& result : results) alive += result.expired() ? 0 : 1;
    most_alive_at_start = std::max(most_alive_at_start, alive);
    lengths.push_back(x.size(1));
    auto y = torch::relu(linear(x));
    results.emplace_back(y.getIntrusivePtr());
    return y;
  }
};
TORCH_MODULE(ResultWatcher);

// `fast` (compiled from `model`) against the watcher's own forward at each of `lengths`, on
// kCallsPerSize fresh inputs each.
template <typename Fast>
void expect_matches_watcher_at(Fast& fast, ResultWatcher& model, const std::vector<std::int64_t>& lengths) {
  for (auto length : lengths) {
    for (int call = 0; call < kCallsPerSize; ++call) {
      auto y = torch::randn({4, length, 32});
      EXPECT_LE(relative_error(fast(y), model->forward(y)), kTolerance) << "length " << length << ", call " << call;
    }
  }
}

// Probing runs the forward at other sizes for its trace alone: a probe's result is let go before
// the next probe runs, so that probing holds one result of the forward beside the call's own (on
// the H200 the sweep's probes held two, its peak 505 MB against eager's 240).
TEST(DynamicShapes, ProbesLetTheirResultsGoBeforeTheNextProbe) {
  torch::manual_seed(5);
  torch::NoGradGuard no_grad;
  ResultWatcher model;
  auto fast = compile(model, options_with(DynamicShapes::Auto, {{0, 1}}));
  auto x = torch::randn({4, 40, 32});
  const auto first = fast(x);
  ASSERT_EQ(fast.stats().symbolic_plans, 1) << fast.report().static_reason;
  ASSERT_GE(model->results.size(), 3u) << "the capture and at least two probes ran the forward";
  // At each probe's start only the call's own result (returned below) is alive.
  EXPECT_LE(model->most_alive_at_start, 1u);
  EXPECT_LE(relative_error(first, model->forward(x)), kTolerance);
  expect_matches_watcher_at(fast, model, {40, 23, 57});
}

// A long call is probed at about a quarter of its length (ProbeDesign's far design): the probes'
// inputs, products and results are a quarter of the call's, so that probing holds a fraction of
// what the call itself does (the H200's sweep, lengths up to 1000, probed at full length: its peak
// was twice eager's). The call's own capture is the fit's check point, so the plan still has to
// agree with the forward at the call's length and at lengths far from the probes.
TEST(DynamicShapes, ALongCallIsProbedAtAQuarterOfItsLength) {
  torch::manual_seed(6);
  torch::NoGradGuard no_grad;
  ResultWatcher model;
  auto fast = compile(model, options_with(DynamicShapes::Auto, {{0, 1}}));
  constexpr std::int64_t kLength = 200;
  auto x = torch::randn({4, kLength, 32});
  const auto first = fast(x);
  ASSERT_EQ(fast.stats().symbolic_plans, 1) << fast.report().static_reason;
  ASSERT_EQ(model->lengths.front(), kLength) << "the call's own capture runs first";
  ASSERT_EQ(model->lengths.size(), 4u) << "the capture, the anchor and two steps from it";
  for (std::size_t k = 1; k < model->lengths.size(); ++k) {
    EXPECT_LE(model->lengths[k], kLength / 4) << "probe " << k;
    EXPECT_GE(model->lengths[k], kLength / 4 - 2) << "probe " << k;
  }
  EXPECT_LE(relative_error(first, model->forward(x)), kTolerance);
  expect_matches_watcher_at(fast, model, {kLength, 33, 49, 317});
  EXPECT_EQ(fast.stats().recaptures, 0);
}

TEST(DynamicShapes, OffMeansExactlyOneRecapturePerNewSignature) {
  torch::manual_seed(3);
  torch::NoGradGuard no_grad;
  LinearRelu model;
  auto fast = compile(model, options_with(DynamicShapes::Off, {{0, 1}}));
  std::set<std::int64_t> distinct;
  for (auto length : random_lengths(30, 3)) {
    distinct.insert(length);
    for (int call = 0; call < kCallsPerSize; ++call) {
      auto x = torch::randn({4, length, 32});
      ASSERT_LE(relative_error(fast(x), model->forward(x)), kTolerance) << "length " << length << ", call " << call;
    }
  }
  auto stats = fast.stats();
  EXPECT_EQ(stats.misses, static_cast<std::int64_t>(distinct.size()));
  EXPECT_EQ(stats.recaptures, static_cast<std::int64_t>(distinct.size()) - 1);
  EXPECT_EQ(stats.symbolic_plans, 0);
  EXPECT_EQ(stats.instantiations, 0);
}

// BERT small (64 positions) over `lengths`, the first call's length first: one symbol for the ids'
// and the mask's length, no recapture, every call matching eager.
void expect_bert_symbolic_over(const std::vector<std::int64_t>& lengths) {
  torch::NoGradGuard no_grad;
  auto config = models::BertConfig::small();
  models::Bert model(config);
  model->eval();
  // Sequence length of both arguments, ids and mask: one symbol.
  auto fast = compile(model, options_with(DynamicShapes::Auto, {{0, 1}, {1, 1}}));
  for (auto length : lengths) {
    for (int call = 0; call < kCallsPerSize; ++call) {
      auto ids = torch::randint(config.vocab_size, {2, length}, torch::kLong);
      auto mask = torch::ones({2, length}, torch::kLong);
      mask.index_put_({0, torch::indexing::Slice(length / 2 + call)}, 0);  // the padding moves too
      ASSERT_LE(relative_error(fast(ids, mask), model->forward(ids, mask)), kTolerance)
          << "length " << length << ", call " << call;
    }
  }
  EXPECT_EQ(fast.stats().recaptures, 0) << fast.report().static_reason;
  EXPECT_EQ(fast.stats().symbolic_plans, 1);
  EXPECT_EQ(fast.report().symbolic, "argument 0 dim 1 = argument 1 dim 1");
}

TEST(DynamicShapes, BertSequenceLengthIsSymbolicPositionIdsIncluded) {
  torch::manual_seed(3);
  expect_bert_symbolic_over(random_lengths(12, 4, 64));
}

// A first call of 48 tokens is probed at a quarter of them (12, 11, 10): the position ids, the
// mask's broadcast and every view fitted from there, checked at 48, must hold at lengths on both
// sides of the probes.
TEST(DynamicShapes, BertFirstCalledLongIsProbedAtAQuarterOfItsLength) {
  torch::manual_seed(8);
  auto lengths = random_lengths(12, 8, 64);
  lengths.insert(lengths.begin(), {48, 64, 10});
  expect_bert_symbolic_over(lengths);
}

// Llama small decoding 12 tokens after a prompt of `prompt` tokens: the cache length becomes
// symbolic at the second step and serves the other ten without capture.
void expect_llama_decoding_symbolic_after(std::int64_t prompt_length) {
  torch::NoGradGuard no_grad;
  auto config = models::LlamaConfig::small();
  models::Llama model(config);
  model->eval();
  auto fast = compile(model, options_with(DynamicShapes::Auto));
  auto [k, v] = models::empty_cache(config, 1);
  auto prompt = torch::randint(config.vocab_size, {1, prompt_length}, torch::kLong);
  auto [logits, k1, v1] = model->forward(prompt, k, v);
  k = k1, v = v1;
  auto ek = k, ev = v;
  // Every decode step has a cache one longer: a new signature each time, called on the cache the
  // last step made and then on a fresh token and fresh cache values of the same layout.
  for (int step = 0; step < 12; ++step) {
    auto token = torch::randint(config.vocab_size, {1, 1}, torch::kLong);
    auto [l1, k2, v2] = fast(token, k, v);
    auto [l2, ek2, ev2] = model->forward(token, ek, ev);
    ASSERT_LE(relative_error(l1, l2), kTolerance) << "step " << step;
    ASSERT_LE(relative_error(k2, ek2), kTolerance) << "step " << step;
    auto other = torch::randint(config.vocab_size, {1, 1}, torch::kLong);
    auto fresh_k = fresh_like(k), fresh_v = fresh_like(v);
    auto [l3, k3, v3] = fast(other, fresh_k, fresh_v);
    auto [l4, k4, v4] = model->forward(other, fresh_k, fresh_v);
    ASSERT_LE(relative_error(l3, l4), kTolerance) << "step " << step << ", fresh values";
    ASSERT_LE(relative_error(v3, v4), kTolerance) << "step " << step << ", fresh values";
    k = k2, v = v2, ek = ek2, ev = ev2;
  }
  auto stats = fast.stats();
  EXPECT_EQ(stats.misses, 2) << fast.report().static_reason;
  EXPECT_EQ(stats.symbolic_plans, 1);
  EXPECT_EQ(stats.instantiations, 10);
}

TEST(DynamicShapes, LlamaCacheLengthIsSymbolicWhileDecoding) {
  torch::manual_seed(4);
  expect_llama_decoding_symbolic_after(6);
}

// A cache of 41 at the second step: probed at caches of 10, 9 and 8 (the far design), the rotary
// positions and the concatenated cache's sizes checked at 41.
TEST(DynamicShapes, LlamaWithALongCacheIsProbedAtAQuarterWhileDecoding) {
  torch::manual_seed(9);
  expect_llama_decoding_symbolic_after(40);
}

TEST(DynamicShapes, SizesOfOneAndOtherDimensionsAreGuarded) {
  torch::manual_seed(6);
  torch::NoGradGuard no_grad;
  LinearRelu model;
  auto fast = compile(model, options_with(DynamicShapes::Auto, {{0, 1}}));
  // Each input, then fresh values of its signature.
  auto expect_computed = [&](const at::Tensor& like, const std::string& what) {
    for (int call = 0; call < kCallsPerSize; ++call) {
      auto x = call == 0 ? like : fresh_like(like);
      EXPECT_LE(relative_error(fast(x), model->forward(x)), kTolerance) << what << ", " << call_name(call);
    }
  };
  expect_computed(torch::randn({4, 50, 32}), "length 50");
  // Length 1 broadcasts differently: captured on its own.
  expect_computed(torch::randn({4, 1, 32}), "length 1");
  EXPECT_EQ(fast.stats().recaptures, 1);
  // A non-contiguous input has another layout than the plan's.
  expect_computed(torch::randn({4, 32, 60}).transpose(1, 2), "transposed");
  EXPECT_EQ(fast.stats().recaptures, 2);
  expect_computed(torch::randn({4, 70, 32}), "length 70");
  EXPECT_EQ(fast.stats().recaptures, 2) << "length 70 is served by the symbolic plan";
}

// Halving the length: no polynomial, so the dimension stays exact and says why.
struct FirstHalfImpl : torch::nn::Module {
  torch::Tensor forward(torch::Tensor x) { return x.narrow(1, 0, x.size(1) / 2) * 2; }
};
TORCH_MODULE(FirstHalf);

TEST(DynamicShapes, WhatNoPolynomialFollowsStaysStaticAndSaysWhy) {
  torch::manual_seed(7);
  torch::NoGradGuard no_grad;
  FirstHalf model;
  auto fast = compile(model, options_with(DynamicShapes::Auto, {{0, 1}}));
  std::set<std::int64_t> distinct;
  for (auto length : random_lengths(10, 5)) {
    distinct.insert(length);
    for (int call = 0; call < kCallsPerSize; ++call) {
      auto x = torch::randn({3, length});
      ASSERT_TRUE(torch::equal(fast(x), model->forward(x))) << "length " << length << ", call " << call;  // x * 2: exact
    }
  }
  EXPECT_EQ(fast.stats().symbolic_plans, 0);
  EXPECT_EQ(fast.stats().recaptures, static_cast<std::int64_t>(distinct.size()) - 1);
}

TEST(DynamicShapes, TheRefusalNamesTheInteger) {
  torch::manual_seed(8);
  torch::NoGradGuard no_grad;
  FirstHalf model;
  auto fast = compile(model, options_with(DynamicShapes::Auto, {{0, 1}}));
  fast(torch::randn({3, 40}));
  const auto reason = fast.report().static_reason;
  EXPECT_NE(reason.find("argument 0 dim 1 cannot be symbolic"), std::string::npos) << reason;
  EXPECT_NE(reason.find("no polynomial of degree 2"), std::string::npos) << reason;
  EXPECT_NE(reason.find("20 at [40]"), std::string::npos) << reason;
}

struct NormalizedImpl : torch::nn::Module {
  torch::nn::BatchNorm1d norm{nullptr};
  NormalizedImpl() { norm = register_module("norm", torch::nn::BatchNorm1d(8)); }
  torch::Tensor forward(torch::Tensor x) { return norm(x); }
};
TORCH_MODULE(Normalized);

TEST(DynamicShapes, AForwardThatUpdatesStatisticsIsNotProbed) {
  torch::manual_seed(9);
  torch::NoGradGuard no_grad;
  Normalized model;
  model->train();
  auto fast = compile(model, options_with(DynamicShapes::Auto, {{0, 0}}));
  auto x = torch::randn({16, 8});
  auto before = model->norm->running_mean.clone();
  fast(x);
  EXPECT_NE(fast.report().static_reason.find("writes memory in place"), std::string::npos) << fast.report().static_reason;
  EXPECT_EQ(fast.stats().symbolic_plans, 0);
  // One capture ran the forward once, as eager would: the statistics moved once, not per probe.
  auto expected = before * 0.9 + x.mean(0) * 0.1;
  EXPECT_TRUE(torch::allclose(model->norm->running_mean, expected, 1e-5, 1e-6));
}

// The example plugin (plugins/example) leaves zn_compile_args.shape_generic 0: each new size
// compiles its group again, and the instance still serves the call without a recapture.
TEST(DynamicShapes, KernelsThatAreNotShapeGenericAreCompiledAgainPerSize) {
  torch::manual_seed(10);
  torch::NoGradGuard no_grad;
  auto options = options_with(DynamicShapes::Auto, {{0, 0}, {1, 0}});
  options.plugin_paths = {ZENITH_EXAMPLE_PLUGIN_DIR};
  options.backends = {"example", "cpu"};
  auto fn = [](at::Tensor x, at::Tensor y) { return torch::sigmoid(torch::relu(x) * y + x) - y; };
  auto fast = compile(fn, options);
  // The example plugin's float32 kernel against ATen: its sigmoid uses the C library's exp, about
  // an ulp from ATen's, and may contract relu(x) * y + x into one rounding; with sigmoid's slope
  // at most 1/4, a few ulps (1.2e-7 each) of values of order one, inside 1e-6 + 1e-6 |eager|.
  auto x = torch::randn({40, 7}), y = torch::randn({40, 7});
  ASSERT_TRUE(torch::allclose(fast(x, y), fn(x, y), 1e-6, 1e-6)) << "the capture";
  ASSERT_EQ(fast.report().nodes_per_backend.count("example"), 1u) << fast.report().to_string();
  const auto before = fast.stats();
  ASSERT_EQ(before.symbolic_plans, 1) << fast.report().static_reason;
  for (std::int64_t rows : {40, 41, 12, 90}) {
    for (int call = 0; call < kCallsPerSize; ++call) {
      auto x = torch::randn({rows, 7}), y = torch::randn({rows, 7});
      ASSERT_TRUE(torch::allclose(fast(x, y), fn(x, y), 1e-6, 1e-6)) << rows << " rows, call " << call;
    }
  }
  const auto after = fast.stats();
  EXPECT_EQ(after.recaptures, 0);
  EXPECT_EQ(after.instantiations, 3);
  EXPECT_EQ(after.kernels_compiled - before.kernels_compiled, 3) << "one compile of the fused group per size";
}

TEST(DynamicShapes, DeclaredDimensionsAreChecked) {
  torch::manual_seed(11);
  torch::NoGradGuard no_grad;
  LinearRelu model;
  auto fast = compile(model, options_with(DynamicShapes::Auto, {{3, 0}}));
  for (int call = 0; call < kCallsPerSize; ++call) {
    auto x = torch::randn({4, 9, 32});
    EXPECT_LE(relative_error(fast(x), model->forward(x)), kTolerance) << call_name(call);
  }
  EXPECT_NE(fast.report().static_reason.find("argument 3 is not a tensor argument"), std::string::npos)
      << fast.report().static_reason;
}

}  // namespace
}  // namespace zenith
