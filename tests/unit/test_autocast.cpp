// Calls in an autocast region compile (CPU autocast, bfloat16): the trace holds the casts autocast
// made, the plan runs them with autocast off, and the region is part of the signature. Inference
// and training calls are compared with eager autocast on fresh inputs, results, dtypes and
// gradients; a call outside the region gets a plan of its own. Then the rewrite of in-place
// arithmetic that writes another dtype than it reads (capture/promoting_writes.h) on hand-built
// graphs: what it rewrites, what it leaves, and equal results.
#include <gtest/gtest.h>

#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include "capture/autocast_inner_casts.h"
#include "capture/promoting_writes.h"
#include "common_relative_error.h"
#include "core/interpreter.h"
#include "graph_builders.h"
#include "passes/autodiff/training_rewrite.h"
#include "zenith/compile.h"

namespace zenith {
namespace {

using testing::relative_error;

// The plan runs the very casts and ATen kernels eager autocast runs, on the CPU plugin; elementwise
// groups fused by the CPU plugin may round an intermediate once where eager rounds twice: up to a
// few bfloat16 units in the last place (2^-8 = 3.9e-3 relative) on a well-scaled result. A plan that
// computed in float32, or from stale casts, is off in dtype or by the weights' change.
constexpr double kBfloat16Tolerance = 2e-2;
// Outside autocast: float32 through the same kernels.
constexpr double kFloat32Tolerance = 1e-5;

// Two linear layers (autocast casts both to bfloat16), GELU and layer norm (kept in float32 by
// CPU autocast) and a softmax.
struct MixedImpl : torch::nn::Module {
  MixedImpl()
      : a(register_module("a", torch::nn::Linear(16, 32))),
        norm(register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({32})))),
        b(register_module("b", torch::nn::Linear(32, 8))) {}
  torch::Tensor forward(torch::Tensor x) { return torch::softmax(b(norm(torch::gelu(a(x)))), -1) * 4 + x.narrow(1, 0, 8); }
  torch::nn::Linear a;
  torch::nn::LayerNorm norm;
  torch::nn::Linear b;
};
TORCH_MODULE(Mixed);

// The CPU autocast region of a `with torch.autocast("cpu", dtype=torch.bfloat16)` block.
class CpuAutocast {
 public:
  CpuAutocast() : enabled_(at::autocast::is_autocast_enabled(at::kCPU)), dtype_(at::autocast::get_autocast_dtype(at::kCPU)) {
    at::autocast::set_autocast_enabled(at::kCPU, true);
    at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
    at::autocast::increment_nesting();
  }
  ~CpuAutocast() {
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_autocast_enabled(at::kCPU, enabled_);
    at::autocast::set_autocast_dtype(at::kCPU, dtype_);
  }
  CpuAutocast(const CpuAutocast&) = delete;
  CpuAutocast& operator=(const CpuAutocast&) = delete;

 private:
  const bool enabled_;
  const at::ScalarType dtype_;
};

CompileOptions strict(const std::string& name) {
  CompileOptions options;
  options.fallback_to_eager = false;
  options.name = name;
  return options;
}

TEST(Autocast, InferenceInARegionCompilesAndMatchesEagerAutocast) {
  torch::manual_seed(41);
  torch::NoGradGuard no_grad;
  Mixed model;
  model->eval();
  auto fast = compile(model, strict("autocast inference"));
  {
    CpuAutocast region;
    // An eager call first: autocast now holds casts of the weights, which the capture must not read.
    model->forward(torch::randn({4, 16}));
    for (int call = 0; call < 4; ++call) {
      auto x = torch::randn({4, 16});
      auto got = fast(x), want = model->forward(x);
      EXPECT_EQ(got.scalar_type(), want.scalar_type()) << "call " << call;
      EXPECT_LT(relative_error(got.to(at::kFloat), want.to(at::kFloat)), kBfloat16Tolerance) << "call " << call;
    }
  }
  EXPECT_FALSE(fast.report().eager_fallback) << fast.report().fallback_reason;
  EXPECT_NE(fast.report().signature.find("autocast cpu:bfloat16"), std::string::npos) << fast.report().signature;
  EXPECT_EQ(fast.stats().eager_calls, 0);
  EXPECT_EQ(fast.stats().misses, 1);

  // Outside the region: another signature, float32 throughout.
  for (int call = 0; call < 3; ++call) {
    auto x = torch::randn({4, 16});
    auto got = fast(x), want = model->forward(x);
    EXPECT_EQ(got.scalar_type(), at::kFloat);
    EXPECT_LT(relative_error(got, want), kFloat32Tolerance) << "outside, call " << call;
  }
  EXPECT_EQ(fast.stats().misses, 2);
  // In place, between calls, as a training loop's step: the next region's casts see it.
  for (auto& p : model->parameters()) p.mul_(-0.75);
  {
    CpuAutocast region;
    for (int call = 0; call < 3; ++call) {
      auto x = torch::randn({4, 16});
      auto got = fast(x), want = model->forward(x);
      EXPECT_LT(relative_error(got.to(at::kFloat), want.to(at::kFloat)), kBfloat16Tolerance) << "after an update, call " << call;
    }
  }
  EXPECT_EQ(fast.stats().misses, 2) << "the region's plan served again";
}

TEST(Autocast, TrainingInARegionCompilesWithEagerAutocastsGradients) {
  torch::manual_seed(42);
  Mixed model, twin;
  // The twin runs eagerly with the same parameters.
  {
    torch::NoGradGuard no_grad;
    auto from = model->parameters();
    auto to = twin->parameters();
    for (std::size_t i = 0; i < from.size(); ++i) to[i].copy_(from[i]);
  }
  auto fast = compile(model, strict("autocast training"));
  for (int step = 0; step < 4; ++step) {
    auto x = torch::randn({4, 16});
    auto target = torch::randn({4, 8});
    for (auto* m : {&model, &twin}) (*m)->zero_grad();
    torch::Tensor got, want;
    {
      CpuAutocast region;
      got = fast(x);
      want = twin->forward(x);
    }
    EXPECT_EQ(got.scalar_type(), want.scalar_type()) << "step " << step;
    // The loss and the backward outside the region, in float32, as autocast's documentation asks.
    auto loss = [&](const torch::Tensor& y) { return (y.to(at::kFloat) - target).pow(2).mean(); };
    loss(got).backward();
    loss(want).backward();
    auto grads = model->parameters(), want_grads = twin->parameters();
    for (std::size_t i = 0; i < grads.size(); ++i) {
      ASSERT_TRUE(grads[i].grad().defined()) << "parameter " << i << ", step " << step;
      EXPECT_LT(relative_error(grads[i].grad(), want_grads[i].grad()), kBfloat16Tolerance)
          << "parameter " << i << ", step " << step;
    }
    torch::NoGradGuard no_grad;  // an SGD step on both
    for (std::size_t i = 0; i < grads.size(); ++i) {
      grads[i].sub_(grads[i].grad() * 0.1);
      want_grads[i].sub_(want_grads[i].grad() * 0.1);
    }
  }
  EXPECT_EQ(fast.stats().eager_calls, 0) << fast.report().fallback_reason;
  EXPECT_GE(fast.stats().training_calls, 3);
}

// LibTorch's linear on a batch of sequences adds its bias in place into the product: under autocast
// a float32 bias into a bfloat16 result, which ATen computes in float32 and stores in bfloat16. The
// capture makes it an add in float32 and a cast back (capture/promoting_writes.h): inference and
// training compile, with eager's values and gradients.
TEST(Autocast, AnInPlaceAddOfAnotherDtypeComputesAsEagerDoes) {
  torch::manual_seed(43);
  torch::nn::Linear model(16, 8), twin(16, 8);
  {
    torch::NoGradGuard no_grad;
    twin->weight.copy_(model->weight);
    twin->bias.copy_(model->bias);
  }
  auto fast = compile(model, strict("in-place bias"));
  {
    torch::NoGradGuard no_grad;
    CpuAutocast region;
    for (int call = 0; call < 3; ++call) {
      auto x = torch::randn({2, 5, 16});
      auto got = fast(x), want = twin->forward(x);
      EXPECT_EQ(got.scalar_type(), at::kBFloat16);
      EXPECT_LT(relative_error(got.to(at::kFloat), want.to(at::kFloat)), kBfloat16Tolerance) << "call " << call;
    }
  }
  for (int step = 0; step < 3; ++step) {
    model->zero_grad();
    twin->zero_grad();
    auto x = torch::randn({2, 5, 16});
    torch::Tensor got, want;
    {
      CpuAutocast region;
      got = fast(x);
      want = twin->forward(x);
    }
    EXPECT_EQ(got.scalar_type(), want.scalar_type());
    got.to(at::kFloat).pow(2).sum().backward();
    want.to(at::kFloat).pow(2).sum().backward();
    EXPECT_LT(relative_error(model->weight.grad(), twin->weight.grad()), kBfloat16Tolerance) << "step " << step;
    EXPECT_LT(relative_error(model->bias.grad(), twin->bias.grad()), kBfloat16Tolerance) << "step " << step;
    EXPECT_EQ(model->bias.grad().scalar_type(), at::kFloat);
  }
  EXPECT_EQ(fast.stats().eager_calls, 0) << fast.report().fallback_reason;
  EXPECT_GE(fast.stats().training_calls, 2);
}

// x (bfloat16) * x, then a float32 bias added in place into it: what linear does under autocast.
// `read_after` reads the product again after the write; `into_input` writes into x itself.
ir::Graph bias_added_in_place(bool read_after = false, bool into_input = false) {
  using testing::value;
  testing::GraphBuilder b;
  int x = b.input({2, 3}, at::kBFloat16);
  int bias = b.parameter({3}, "bias");
  int product = into_input ? x : b.op("aten::mul", "Tensor", {value("self", x), value("other", x)});
  int sum = b.op("aten::add_", "Tensor", {value("self", product), value("other", bias), testing::scalar("alpha", 1)});
  std::vector<int> outputs{sum};
  if (read_after) outputs.push_back(b.op("aten::mul", "Scalar", {value("self", product), testing::real("other", 2.0)}));
  return b.finish(outputs);
}

TEST(PromotingWrites, APrivateWriteBecomesTheFunctionalOpAndACastWithTheSameValues) {
  const auto original = bias_added_in_place();
  auto rewritten = original;
  EXPECT_EQ(capture::functionalize_promoting_writes(rewritten), 1);
  EXPECT_EQ(testing::count_nodes(rewritten, "aten::add_"), 0);
  EXPECT_EQ(testing::count_nodes(rewritten, "aten::add"), 1);
  EXPECT_EQ(testing::count_nodes(rewritten, "aten::to"), 1);
  for (const auto& node : rewritten.nodes) {
    if (node.op == "aten::add") {
      EXPECT_EQ(rewritten.value(node.outputs[0]).type.dtype, at::kFloat) << "computed in float32";
    }
  }
  EXPECT_EQ(rewritten.value(rewritten.outputs[0]).type, original.value(original.outputs[0]).type);
  // The same float32 sum rounded once to bfloat16 as in place: equal, on two draws.
  at::manual_seed(44);
  for (int draw = 0; draw < 2; ++draw) {
    std::vector<at::Tensor> inputs{at::randn({2, 3}).to(at::kBFloat16), at::randn({3})};
    const auto want = ir::interpret(original, inputs).at(0);
    const auto got = ir::interpret(rewritten, inputs).at(0);
    EXPECT_EQ(got.scalar_type(), at::kBFloat16);
    EXPECT_TRUE(at::equal(got, want)) << "draw " << draw;
  }
}

// Falcon's `attention_scores /= math.sqrt(head_dim)` traced: float32 scores divided in place by a
// 0-dim float64 tensor, whose dtype does not promote them. The functional op alone, same values.
TEST(PromotingWrites, APrivateWriteThatKeepsItsDtypeBecomesTheFunctionalOpAlone) {
  using testing::value;
  testing::GraphBuilder b;
  int x = b.input({2, 3});
  int divisor = b.input({}, at::kDouble);
  int scores = b.op("aten::mul", "Tensor", {value("self", x), value("other", x)});
  int scaled = b.op("aten::div_", "Tensor", {value("self", scores), value("other", divisor)});
  const auto original = b.finish({scaled});
  auto rewritten = original;
  EXPECT_EQ(capture::functionalize_promoting_writes(rewritten), 1);
  EXPECT_EQ(testing::count_nodes(rewritten, "aten::div_"), 0);
  EXPECT_EQ(testing::count_nodes(rewritten, "aten::div"), 1);
  EXPECT_EQ(testing::count_nodes(rewritten, "aten::to"), 0);
  EXPECT_EQ(rewritten.value(rewritten.outputs[0]).type, original.value(original.outputs[0]).type);
  at::manual_seed(45);
  for (int draw = 0; draw < 2; ++draw) {
    std::vector<at::Tensor> inputs{at::randn({2, 3}), at::rand({}, at::kDouble) + 1};
    const auto want = ir::interpret(original, inputs).at(0);
    const auto got = ir::interpret(rewritten, inputs).at(0);
    EXPECT_EQ(got.scalar_type(), at::kFloat);
    EXPECT_TRUE(at::equal(got, want)) << "draw " << draw;
  }
}

TEST(PromotingWrites, AWriteOthersCanSeeStaysInPlace) {
  for (const auto& [read_after, into_input] : {std::pair{true, false}, std::pair{false, true}}) {
    auto g = bias_added_in_place(read_after, into_input);
    EXPECT_EQ(capture::functionalize_promoting_writes(g), 0) << "read after " << read_after << ", input " << into_input;
    EXPECT_EQ(testing::count_nodes(g, "aten::add_"), 1);
  }
}

// A cross entropy whose log-softmax autocast kept in bfloat16 and whose nll_loss autocast cast to
// float32 (CUDA autocast lists nll_loss, not cross_entropy_loss): the traced node reads bfloat16
// logits and returns a float32 loss. The graph is built on the CPU and its loss retyped float32, as
// the CUDA trace records it.
ir::Graph cross_entropy_traced_under_autocast(c10::ScalarType logits_dtype) {
  using testing::value;
  testing::GraphBuilder b;
  int logits = b.input({6, 10}, logits_dtype);
  int target = b.input({6}, at::kLong);
  int loss = b.op("aten::cross_entropy_loss", "",
                  {value("self", logits), value("target", target), testing::none("weight"),
                   testing::scalar("reduction", 1), testing::scalar("ignore_index", -100),
                   testing::real("label_smoothing", 0.0)});
  auto g = b.finish({loss});
  g.values[static_cast<std::size_t>(loss)]->type.dtype = at::kFloat;
  return g;
}

TEST(AutocastInnerCasts, ACrossEntropyAutocastCastInsideBecomesItsStepsWithTheCastInTheOpen) {
  auto g = cross_entropy_traced_under_autocast(at::kBFloat16);
  EXPECT_EQ(capture::make_autocast_inner_casts_explicit(g), "");
  EXPECT_EQ(testing::count_nodes(g, "aten::cross_entropy_loss"), 0);
  ASSERT_EQ(g.nodes.size(), 3u);
  EXPECT_EQ(g.nodes[0].op, "aten::log_softmax");
  EXPECT_EQ(g.value(g.nodes[0].outputs[0]).type.dtype, at::kBFloat16) << "ATen asks for the logits' dtype";
  EXPECT_EQ(g.nodes[1].op, "aten::to");
  EXPECT_EQ(g.value(g.nodes[1].outputs[0]).type.dtype, at::kFloat);
  EXPECT_EQ(g.nodes[2].op, "aten::nll_loss_nd");
  // ATen's steps with autocast's cast between them, on two draws: the same kernels, equal values.
  at::manual_seed(45);
  for (int draw = 0; draw < 2; ++draw) {
    auto logits = at::randn({6, 10}).to(at::kBFloat16);
    auto target = at::randint(10, {6}, at::kLong);
    const auto got = ir::interpret(g, {logits, target}).at(0);
    const auto want = at::nll_loss_nd(at::log_softmax(logits, 1, at::kBFloat16).to(at::kFloat), target);
    EXPECT_EQ(got.scalar_type(), at::kFloat);
    EXPECT_TRUE(at::allclose(got, want, /*rtol=*/0, /*atol=*/0)) << "draw " << draw;
  }
}

TEST(AutocastInnerCasts, NodesThatComputeAsRecordedAreLeftAlone) {
  // float32 logits give a float32 loss on their own: nothing was cast inside.
  auto g = cross_entropy_traced_under_autocast(at::kFloat);
  EXPECT_EQ(capture::make_autocast_inner_casts_explicit(g), "");
  EXPECT_EQ(testing::count_nodes(g, "aten::cross_entropy_loss"), 1);
  auto chain = testing::elementwise_chain();
  const auto before = chain.nodes.size();
  EXPECT_EQ(capture::make_autocast_inner_casts_explicit(chain), "");
  EXPECT_EQ(chain.nodes.size(), before);
}

// einsum is not on CPU autocast's lists; the bmm inside it is, so float32 operands give a bfloat16
// product that the traced einsum node cannot give again. Its calls run eagerly, and say why.
struct EinsumImpl : torch::nn::Module {
  EinsumImpl() : weight(register_parameter("weight", torch::randn({16, 8}))) {}
  torch::Tensor forward(torch::Tensor x) { return torch::einsum("bi,ij->bj", {x, weight}) + 1; }
  torch::Tensor weight;
};
TORCH_MODULE(Einsum);

TEST(AutocastInnerCasts, AnOpAutocastCastInsideThatIsNotKnownRunsEagerlyAndSaysWhich) {
  torch::manual_seed(46);
  torch::NoGradGuard no_grad;
  Einsum model;
  auto strict_fast = compile(model, strict("einsum strict"));
  {
    CpuAutocast region;
    try {
      strict_fast(torch::randn({4, 16}));
      ADD_FAILURE() << "expected the call to be refused";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("aten::einsum"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("autocast cast inside it"), std::string::npos) << e.what();
    }
  }
  CompileOptions lenient;
  lenient.name = "einsum";
  auto fast = compile(model, lenient);
  {
    CpuAutocast region;
    for (int call = 0; call < 3; ++call) {
      auto x = torch::randn({4, 16});
      auto got = fast(x), want = model->forward(x);
      EXPECT_EQ(got.scalar_type(), at::kBFloat16) << "call " << call;
      EXPECT_LT(relative_error(got.to(at::kFloat), want.to(at::kFloat)), kFloat32Tolerance) << "eager's own kernels, call " << call;
    }
  }
  EXPECT_EQ(fast.stats().eager_calls, 3);
  EXPECT_NE(fast.report().fallback_reason.find("aten::einsum"), std::string::npos) << fast.report().fallback_reason;
}

// Training batch norm on CUDA runs cuDNN's kernels where eager does (ATen's
// _select_batch_norm_backend): never for a bfloat16 input, which autocast leaves bfloat16 with its
// float32 weight; for float16 only with a float32 weight. The rewrite reads types alone, so the graph
// is built on the CPU and its types moved to CUDA.
std::string training_batch_norm_op(c10::ScalarType input_dtype, c10::ScalarType weight_dtype) {
  using testing::value;
  testing::GraphBuilder b;
  int x = b.input({2, 3, 4, 4});
  int weight = b.parameter({3}, "weight"), bias = b.parameter({3}, "bias");
  int mean = b.parameter({3}, "running_mean"), var = b.parameter({3}, "running_var");
  int y = b.op("aten::batch_norm", "",
               {value("input", x), value("weight", weight), value("bias", bias), value("running_mean", mean),
                value("running_var", var), ir::Argument{"training", true}, testing::real("momentum", 0.1),
                testing::real("eps", 1e-5), ir::Argument{"cudnn_enabled", true}});
  auto g = b.finish({y});
  for (auto& v : g.values) {
    if (v) v->type.device = c10::Device(c10::kCUDA, 0);
  }
  g.values[static_cast<std::size_t>(x)]->type.dtype = input_dtype;
  g.values[static_cast<std::size_t>(y)]->type.dtype = input_dtype;
  g.values[static_cast<std::size_t>(weight)]->type.dtype = weight_dtype;
  autodiff::rewrite_for_training(g);
  return g.nodes.at(0).op;
}

TEST(TrainingRewrite, BatchNormRunsCudnnWhereEagerDoes) {
  EXPECT_EQ(training_batch_norm_op(at::kFloat, at::kFloat), "aten::cudnn_batch_norm");
  EXPECT_EQ(training_batch_norm_op(at::kHalf, at::kFloat), "aten::cudnn_batch_norm");
  EXPECT_EQ(training_batch_norm_op(at::kBFloat16, at::kFloat), "aten::native_batch_norm");
  EXPECT_EQ(training_batch_norm_op(at::kBFloat16, at::kBFloat16), "aten::native_batch_norm");
  EXPECT_EQ(training_batch_norm_op(at::kHalf, at::kHalf), "aten::native_batch_norm");
}

}  // namespace
}  // namespace zenith
