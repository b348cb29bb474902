// The model zoo, compiled, against eager on the CPU in float32: max relative error 1e-5, on the
// capture and on replays with fresh inputs of the same signature, also after the parameters change
// between calls; and the op registry knows every op the zoo uses.
#include <gtest/gtest.h>

#include <set>

#include <torch/torch.h>

#include "capture/tracer_capture.h"
#include "core/op_registry.h"
#include "models/bert.h"
#include "models/cnn.h"
#include "models/llama.h"
#include "models/mlp.h"
#include "common/fresh_inputs.h"
#include "common_relative_error.h"
#include "zenith/compile.h"

namespace zenith {
namespace {

// The CPU plugin runs the same ATen kernels as eager, through the dispatcher, in the same order;
// what moves a result is a kernel choosing another summation order for another layout or
// alignment of its operands (matrix products, softmax, layer norm): ulps of the largest partial
// sums, compounded over a few layers. A stale or wrong value is off by order one.
constexpr double kTolerance = 1e-5;

using testing::call_name;
using testing::kCallsPerSignature;
using testing::relative_error;

CompileOptions strict(const std::string& name) {
  CompileOptions options;
  options.name = name;
  options.fallback_to_eager = false;
  return options;
}

// Nudges every parameter, as an optimizer step would.
void perturb(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  for (auto& p : module.parameters()) p.add_(torch::randn_like(p) * 0.01);
}

detail::ModuleAccess access_of(std::function<c10::IValue(const std::vector<c10::IValue>&)> forward) {
  detail::ModuleAccess access;
  access.forward = std::move(forward);
  return access;
}

std::set<std::string> unknown_ops(const detail::ModuleAccess& access, const std::vector<c10::IValue>& args,
                                  const std::vector<std::pair<std::string, at::Tensor>>& state) {
  auto capture = capture::capture_forward(access, args, state);
  EXPECT_TRUE(capture.unsupported.empty()) << capture.unsupported;
  std::set<std::string> unknown;
  for (const auto& node : capture.graph.nodes) {
    if (!ir::op_info(node.op).known) unknown.insert(node.op);
  }
  return unknown;
}

TEST(ModelsCompiled, Mlp) {
  torch::manual_seed(1);
  torch::NoGradGuard no_grad;
  models::Mlp model(models::MlpConfig::small());
  auto fast = compile(model, strict("mlp"));
  for (int call = 0; call < kCallsPerSignature; ++call) {
    auto x = torch::randn({8, models::MlpConfig::small().in});
    EXPECT_LE(relative_error(fast(x), model->forward(x)), kTolerance) << call_name(call);
  }
  perturb(*model);
  auto x = torch::randn({8, models::MlpConfig::small().in});
  EXPECT_LE(relative_error(fast(x), model->forward(x)), kTolerance) << "after the parameters changed";
  EXPECT_EQ(fast.stats().misses, 1);
}

TEST(ModelsCompiled, Cnn) {
  torch::manual_seed(2);
  torch::NoGradGuard no_grad;
  auto config = models::CnnConfig::small();
  models::Cnn model(config);
  model->eval();
  auto fast = compile(model, strict("cnn"));
  auto images = [&] { return torch::randn({2, config.in_channels, config.image_size, config.image_size}); };
  for (int call = 0; call < kCallsPerSignature; ++call) {
    auto x = images();
    EXPECT_LE(relative_error(fast(x), model->forward(x)), kTolerance) << call_name(call);
  }
  perturb(*model);
  auto x = images();
  EXPECT_LE(relative_error(fast(x), model->forward(x)), kTolerance) << "after the parameters changed";
  EXPECT_EQ(fast.stats().misses, 1);
}

TEST(ModelsCompiled, Bert) {
  torch::manual_seed(3);
  torch::NoGradGuard no_grad;
  auto config = models::BertConfig::small();
  models::Bert model(config);
  model->eval();
  auto fast = compile(model, strict("bert"));
  // Fresh token ids and a fresh padding length in the first row every call (the mask is data).
  auto draw = [&] {
    auto ids = torch::randint(config.vocab_size, {2, 12}, torch::kLong);
    auto mask = torch::ones({2, 12}, torch::kLong);
    mask.index_put_({0, torch::indexing::Slice(torch::randint(4, 12, {1}).item<std::int64_t>())}, 0);
    return std::make_pair(ids, mask);
  };
  for (int call = 0; call < kCallsPerSignature; ++call) {
    auto [ids, mask] = draw();
    EXPECT_LE(relative_error(fast(ids, mask), model->forward(ids, mask)), kTolerance) << call_name(call);
  }
  perturb(*model);
  auto [ids, mask] = draw();
  EXPECT_LE(relative_error(fast(ids, mask), model->forward(ids, mask)), kTolerance) << "after the parameters changed";
  EXPECT_EQ(fast.stats().misses, 1);
}

TEST(ModelsCompiled, LlamaPromptThenDecodeWithTheCache) {
  torch::manual_seed(4);
  torch::NoGradGuard no_grad;
  auto config = models::LlamaConfig::small();
  models::Llama model(config);
  model->eval();
  auto fast = compile(model, strict("llama"));
  auto [k0, v0] = models::empty_cache(config, 1);
  auto prompt = [&] { return torch::randint(config.vocab_size, {1, 6}, torch::kLong); };
  auto token = [&] { return torch::randint(config.vocab_size, {1, 1}, torch::kLong); };
  // The prompt's signature: the capture, then replays on fresh prompts.
  at::Tensor k, v, e_k, e_v;
  for (int call = 0; call < kCallsPerSignature; ++call) {
    auto tokens = prompt();
    auto [logits, k1, v1] = fast(tokens, k0, v0);
    auto [e_logits, e_k1, e_v1] = model->forward(tokens, k0, v0);
    EXPECT_LE(relative_error(logits, e_logits), kTolerance) << "prompt, " << call_name(call);
    EXPECT_LE(relative_error(k1, e_k1), kTolerance) << "prompt, " << call_name(call);
    k = k1, v = v1, e_k = e_k1, e_v = e_v1;
  }
  // Decode three tokens one at a time; each step has a new cache length, hence a new signature:
  // called on the cache the last step made, then on fresh tokens and fresh cache values of it.
  for (int step = 0; step < 3; ++step) {
    auto next = token();
    auto [l1, k1, v1] = fast(next, k, v);
    auto [l2, k2, v2] = model->forward(next, e_k, e_v);
    EXPECT_LE(relative_error(l1, l2), kTolerance) << "step " << step << ", " << call_name(0);
    EXPECT_LE(relative_error(k1, k2), kTolerance) << "step " << step << ", " << call_name(0);
    for (int call = 1; call < kCallsPerSignature; ++call) {
      auto other = token();
      auto fresh_k = testing::fresh_like(k), fresh_v = testing::fresh_like(v);
      auto [l3, k3, v3] = fast(other, fresh_k, fresh_v);
      auto [l4, k4, v4] = model->forward(other, fresh_k, fresh_v);
      EXPECT_LE(relative_error(l3, l4), kTolerance) << "step " << step << ", " << call_name(call);
      EXPECT_LE(relative_error(v3, v4), kTolerance) << "step " << step << ", " << call_name(call);
    }
    k = k1, v = v1, e_k = k2, e_v = v2;
  }
  perturb(*model);
  auto tokens = prompt();
  auto [l5, k5, v5] = fast(tokens, k0, v0);
  EXPECT_LE(relative_error(l5, std::get<0>(model->forward(tokens, k0, v0))), kTolerance)
      << "after the parameters changed";
  // Hits: the prompt's two replays, each decode step's two, the prompt after the perturbation.
  EXPECT_EQ(fast.stats().hits, 2 + 3 * 2 + 1);
}

// The static-cache form (issue 18): one decode signature serves every position, so the plan must
// read the position and the cache from the call, never from the trace; its in-place writes must
// land in the caller's cache. Checked against the growing-cache form run eagerly, token by token,
// over 128 decode steps, with the parameters changed halfway (both forms then compute the new
// tokens with the new parameters over the same earlier keys and values).
TEST(ModelsCompiled, LlamaStaticCacheDecodes128TokensAsTheGrowingCache) {
  torch::manual_seed(11);
  torch::NoGradGuard no_grad;
  auto config = models::LlamaConfig::small();
  config.max_position_embeddings = 160;
  models::Llama model(config);
  model->eval();
  auto fast = compile(models::LlamaStaticCache(model), strict("llama_static"));
  constexpr int64_t kPrompt = 7, kSteps = 128, kSlots = kPrompt + kSteps + 3;
  auto [cache_k, cache_v] = models::static_cache(config, 1, kSlots);
  auto [past_k, past_v] = models::empty_cache(config, 1);
  auto positions = [](int64_t from, int64_t count) { return torch::arange(from, from + count, torch::kLong); };

  auto prompt = torch::randint(config.vocab_size, {1, kPrompt}, torch::kLong);
  at::Tensor logits = fast(prompt, positions(0, kPrompt), cache_k, cache_v);
  auto [e_logits, e_k, e_v] = model->forward(prompt, past_k, past_v);
  EXPECT_LE(relative_error(logits, e_logits), kTolerance) << "prompt";
  for (int64_t step = 0; step < kSteps; ++step) {
    if (step == kSteps / 2) perturb(*model);
    auto token = torch::randint(config.vocab_size, {1, 1}, torch::kLong);
    at::Tensor step_logits = fast(token, positions(kPrompt + step, 1), cache_k, cache_v);
    std::tie(e_logits, e_k, e_v) = model->forward(token, e_k, e_v);
    ASSERT_LE(relative_error(step_logits, e_logits), kTolerance) << "decode step " << step;
  }
  // The caller's caches hold every position written, the rest untouched.
  const int64_t written = kPrompt + kSteps;
  EXPECT_LE(relative_error(cache_k.narrow(3, 0, written), e_k), kTolerance);
  EXPECT_LE(relative_error(cache_v.narrow(3, 0, written), e_v), kTolerance);
  EXPECT_EQ(cache_k.narrow(3, written, kSlots - written).abs().max().item<float>(), 0.0f);
  // Two signatures (the prompt, the decode step), each captured once; every later step a hit.
  EXPECT_EQ(fast.stats().eager_calls, 0);
  EXPECT_EQ(fast.stats().hits, kSteps - 1);

  // Another generation in other caches: the plan writes where it is told, not where it wrote.
  auto [other_k, other_v] = models::static_cache(config, 1, kSlots);
  auto first_k = cache_k.clone();
  auto again = torch::randint(config.vocab_size, {1, 1}, torch::kLong);
  auto [e_again_k, e_again_v] = models::static_cache(config, 1, kSlots);
  at::Tensor again_logits = fast(again, positions(0, 1), other_k, other_v);
  at::Tensor e_again = model->forward_cached(again, positions(0, 1), e_again_k, e_again_v);
  EXPECT_LE(relative_error(again_logits, e_again), kTolerance);
  EXPECT_LE(relative_error(other_k, e_again_k), kTolerance);
  EXPECT_TRUE(torch::equal(cache_k, first_k)) << "the first generation's cache changed";
}

struct RegularizedImpl : torch::nn::Module {
  RegularizedImpl() : lin(register_module("lin", torch::nn::Linear(8, 8))), drop(register_module("drop", torch::nn::Dropout(0.2))) {}
  std::vector<torch::Tensor> forward(torch::Tensor x) { return {drop(x), torch::tanh(drop(lin(x))) + 1}; }
  torch::nn::Linear lin;
  torch::nn::Dropout drop;
};
TORCH_MODULE(Regularized);

TEST(ModelsCompiled, EvalDropoutsRunNothingAndReturnTheirInputAsEagerDoes) {
  torch::manual_seed(8);
  torch::NoGradGuard no_grad;
  Regularized model;
  model->eval();
  auto fast = compile(model, strict("regularized"));
  for (int call = 0; call < kCallsPerSignature; ++call) {
    auto x = torch::randn({3, 8});
    auto want = model->forward(x);
    auto got = fast(x);
    ASSERT_EQ(got.size(), 2u);
    // Eager's dropout in eval returns its input tensor itself.
    EXPECT_EQ(want[0].data_ptr(), x.data_ptr());
    EXPECT_EQ(got[0].data_ptr(), x.data_ptr()) << call_name(call);
    EXPECT_LE(relative_error(got[1], want[1]), kTolerance) << call_name(call);
  }
  const auto report = fast.report();
  ASSERT_FALSE(report.passes.empty());
  EXPECT_EQ(report.passes.front().name, "identities");
  EXPECT_EQ(report.passes.front().counters.at("removed"), 2) << report.to_string();
  EXPECT_EQ(fast.stats().eager_calls, 0);
}

TEST(ModelsCompiled, RegistryKnowsEveryZooOp) {
  torch::manual_seed(5);  // capture only, nothing compared: one input per model is enough
  torch::NoGradGuard no_grad;
  auto state_of = [](torch::nn::Module& m) {
    std::vector<std::pair<std::string, at::Tensor>> state;
    for (const auto& p : m.named_parameters()) state.emplace_back(p.key(), p.value());
    for (const auto& b : m.named_buffers()) state.emplace_back(b.key(), b.value());
    return state;
  };
  std::set<std::string> unknown;
  auto merge = [&](const std::set<std::string>& more) { unknown.insert(more.begin(), more.end()); };

  models::Mlp mlp(models::MlpConfig::small());
  merge(unknown_ops(access_of([&](const std::vector<c10::IValue>& a) { return c10::IValue(mlp->forward(a[0].toTensor())); }),
                    {torch::randn({2, models::MlpConfig::small().in})}, state_of(*mlp)));
  auto cnn_config = models::CnnConfig::small();
  models::Cnn cnn(cnn_config);
  cnn->eval();
  merge(unknown_ops(access_of([&](const std::vector<c10::IValue>& a) { return c10::IValue(cnn->forward(a[0].toTensor())); }),
                    {torch::randn({1, cnn_config.in_channels, cnn_config.image_size, cnn_config.image_size})},
                    state_of(*cnn)));
  auto bert_config = models::BertConfig::small();
  models::Bert bert(bert_config);
  bert->eval();
  merge(unknown_ops(access_of([&](const std::vector<c10::IValue>& a) {
                      return c10::IValue(bert->forward(a[0].toTensor(), a[1].toTensor()));
                    }),
                    {torch::randint(bert_config.vocab_size, {1, 5}, torch::kLong), torch::ones({1, 5}, torch::kLong)},
                    state_of(*bert)));
  auto llama_config = models::LlamaConfig::small();
  models::Llama llama(llama_config);
  auto [k0, v0] = models::empty_cache(llama_config, 1);
  merge(unknown_ops(access_of([&](const std::vector<c10::IValue>& a) {
                      return c10::IValue(llama->forward(a[0].toTensor(), a[1].toTensor(), a[2].toTensor()));
                    }),
                    {torch::randint(llama_config.vocab_size, {1, 4}, torch::kLong), k0, v0}, state_of(*llama)));
  EXPECT_TRUE(unknown.empty()) << "ops missing from core/op_registry.cpp: " << [&] {
    std::string names;
    for (const auto& n : unknown) names += n + " ";
    return names;
  }();
}

}  // namespace
}  // namespace zenith
