// Attention fusion: the attention written out by hand becomes one scaled_dot_product_attention
// node in the forms models write it (scale as mul or div or none, a constant additive mask on
// either side or none, a constant causal mask filling the scores by masked_fill or where, and
// autocast's float32 softmax between float16 or bfloat16 products), the head merge after it is
// typed again as a free view, and patterns whose intermediates are read elsewhere, or whose mask
// is data, are left alone. Results are checked against the unfused graph on fresh inputs.
#include <gtest/gtest.h>

#include <limits>
#include <optional>

#include <ATen/ATen.h>

#include "core/interpreter.h"
#include "core/node_arguments.h"
#include "core/verifier.h"
#include "graph_builders.h"
#include "passes/attention_fusion.h"
#include "passes/dead_code_elimination.h"

namespace zenith::passes {
namespace {

using testing::cast;
using testing::GraphBuilder;
using testing::ints;
using testing::none;
using testing::real;
using testing::scalar;
using testing::value;

constexpr std::int64_t kBatch = 2, kHeads = 3, kTokens = 5, kDim = 8;

enum class Scale { Mul, Div, None };
enum class Mask { Right, Left, None };

struct Attention {
  GraphBuilder builder;
  int scores = -1, probabilities = -1, context = -1, merged = -1;
};

// q, k and v made from x [B, T, H*D] and split into heads as models do (view, transpose), cast
// first under `autocast`; a.scores = q @ k^T. Returns v.
int scores_and_values(Attention& a, int x, std::optional<c10::ScalarType> autocast = std::nullopt) {
  auto& b = a.builder;
  auto heads = [&](int t) {
    if (autocast) t = cast(b, t, *autocast);
    int split = b.op("aten::view", "", {value("self", t), ints("size", {kBatch, kTokens, kHeads, kDim})});
    return b.op("aten::transpose", "int", {value("self", split), scalar("dim0", 1), scalar("dim1", 2)});
  };
  int q = heads(b.op("aten::tanh", "", {value("self", x)}));
  int k = heads(b.op("aten::sin", "", {value("self", x)}));
  int v = heads(b.op("aten::cos", "", {value("self", x)}));
  int kt = b.op("aten::transpose", "int", {value("self", k), scalar("dim0", -2), scalar("dim1", -1)});
  a.scores = b.op("aten::matmul", "", {value("self", q), value("other", kt)});
  return v;
}

// What follows the masked scores: the softmax, the product with v and the heads merged again
// (transpose(1, 2), reshape). With `autocast`, the softmax in float32 and its result cast back to
// that dtype for the product.
void attend(Attention& a, int masked, int v, std::optional<c10::ScalarType> autocast = std::nullopt) {
  auto& b = a.builder;
  if (autocast) {
    a.probabilities = b.op("aten::softmax", "int",
                           {value("self", masked), scalar("dim", -1), scalar("dtype", static_cast<std::int64_t>(at::kFloat))});
    a.context = b.op("aten::matmul", "", {value("self", cast(b, a.probabilities, *autocast)), value("other", v)});
  } else {
    a.probabilities = b.op("aten::softmax", "int", {value("self", masked), scalar("dim", -1), none("dtype")});
    a.context = b.op("aten::matmul", "", {value("self", a.probabilities), value("other", v)});
  }
  int back = b.op("aten::transpose", "int", {value("self", a.context), scalar("dim0", 1), scalar("dim1", 2)});
  a.merged = b.op("aten::reshape", "", {value("self", back), ints("shape", {kBatch, kTokens, kHeads * kDim})});
}

// x [B, T, H*D] split into heads as models do (view, transpose), attention, heads merged again.
// With `autocast`, as a CUDA autocast region records it: q, k and v cast to that dtype, the
// float32 mask promoting the scores, a float32 softmax, its result cast back for the product.
// The additive mask [B, 1, 1, T] is a constant (0 or -1e4, key 0 seen by every query), or with
// `mask_is_input` an input.
void build(Attention& a, Scale scale, Mask mask, c10::ScalarType mask_dtype = at::kFloat,
           std::optional<c10::ScalarType> autocast = std::nullopt, bool mask_is_input = false) {
  auto& b = a.builder;
  int x = b.input({kBatch, kTokens, kHeads * kDim});
  int additive = -1;
  if (mask_is_input) {
    additive = b.input({kBatch, 1, 1, kTokens}, mask_dtype);
  } else if (mask != Mask::None) {
    at::manual_seed(5);
    auto hidden = at::rand({kBatch, 1, 1, kTokens}) < 0.3;
    hidden.select(3, 0).fill_(false);
    additive = b.constant(at::zeros({kBatch, 1, 1, kTokens}).masked_fill(hidden, -1e4).to(mask_dtype));
  }
  const int v = scores_and_values(a, x, autocast);
  int scaled = a.scores;
  if (scale == Scale::Mul) scaled = b.op("aten::mul", "Scalar", {value("self", a.scores), real("other", 0.35)});
  if (scale == Scale::Div) scaled = b.op("aten::div", "Scalar", {value("self", a.scores), real("other", 2.8)});
  int masked = scaled;
  if (mask == Mask::Right) {
    masked = b.op("aten::add", "Tensor", {value("self", scaled), value("other", additive), scalar("alpha", 1)});
  }
  if (mask == Mask::Left) {
    masked = b.op("aten::add", "Tensor", {value("self", additive), value("other", scaled), scalar("alpha", 1)});
  }
  attend(a, masked, v, autocast);
}


// Fresh draws of every input; the mask's entries 0 or -1e4 as models make them.
void expect_same_results(const ir::Graph& before, const ir::Graph& after, const std::vector<at::Tensor>& examples) {
  at::manual_seed(17);
  for (int draw = 0; draw < 2; ++draw) {
    std::vector<at::Tensor> inputs;
    for (const auto& example : examples) {
      inputs.push_back(example.dim() == 4 ? (at::rand_like(example) < 0.3).to(example.scalar_type()) * -1e4
                                          : at::randn_like(example));
    }
    auto want = ir::interpret(before, inputs), got = ir::interpret(after, inputs);
    ASSERT_EQ(want.size(), got.size());
    // 1e-5: a fused kernel sums the products in another order than two matrix products do.
    for (std::size_t k = 0; k < want.size(); ++k) {
      EXPECT_TRUE(at::allclose(got[k], want[k], 1e-5, 1e-5)) << "draw " << draw << ", output " << k;
    }
  }
}

// `graph` through the fusion (on any device) and dead-code elimination, which must leave one fused
// node and neither the softmax nor a product.
ir::Graph fused_once(ir::Graph graph) {
  PassReport report;
  AttentionFusion(/*cuda_only=*/false).run(graph, report);
  EXPECT_EQ(report.counters["fused"], 1);
  DeadCodeElimination().run(graph, report);
  EXPECT_EQ(testing::count_nodes(graph, "aten::scaled_dot_product_attention"), 1);
  EXPECT_EQ(testing::count_nodes(graph, "aten::softmax"), 0);
  EXPECT_EQ(testing::count_nodes(graph, "aten::matmul"), 0);
  return graph;
}

TEST(AttentionFusion, EveryWrittenOutFormBecomesOneFusedNode) {
  for (auto scale : {Scale::Mul, Scale::Div, Scale::None}) {
    for (auto mask : {Mask::Right, Mask::Left, Mask::None}) {
      SCOPED_TRACE(::testing::Message() << "scale " << static_cast<int>(scale) << ", mask " << static_cast<int>(mask));
      Attention a;
      build(a, scale, mask);
      const auto before = a.builder.finish({a.merged});
      const auto graph = fused_once(before);
      // Heads split for q, k, v and merged once: k's own transpose for the product is gone.
      EXPECT_EQ(testing::count_nodes(graph, "aten::transpose"), 4);
      EXPECT_NO_THROW(ir::verify(graph));
      // The fused result lies over [B, T, H, D] memory, so merging the heads is a view: the
      // transposed value is contiguous, and the merged one keeps its type.
      const auto& back = graph.value(graph.nodes.back().input_ids().front()).type;
      EXPECT_EQ(back.strides, (std::vector<std::int64_t>{kTokens * kHeads * kDim, kHeads * kDim, kDim, 1}));
      EXPECT_EQ(graph.value(a.merged).type, before.value(a.merged).type);
      expect_same_results(before, graph, a.builder.example_inputs());
    }
  }
}

TEST(AttentionFusion, AutocastsFloat32SoftmaxBecomesOneFusedNode) {
  const std::pair<c10::ScalarType, Mask> cases[] = {
      {at::kBFloat16, Mask::Right}, {at::kBFloat16, Mask::None}, {at::kHalf, Mask::None}};
  for (const auto& [dtype, mask] : cases) {
    SCOPED_TRACE(::testing::Message() << c10::toString(dtype) << ", mask " << static_cast<int>(mask));
    Attention a;
    build(a, Scale::Mul, mask, at::kFloat, dtype);
    const auto before = a.builder.finish({a.merged});
    const auto graph = fused_once(before);
    const ir::Node* fused = nullptr;
    for (const auto& node : graph.nodes) {
      if (node.op == "aten::scaled_dot_product_attention") fused = &node;
    }
    ASSERT_NE(fused, nullptr);
    for (int id : fused->input_ids()) {
      EXPECT_EQ(graph.value(id).type.dtype, dtype) << "the fused kernels take q, k, v and the mask in one dtype";
    }
    EXPECT_NO_THROW(ir::verify(graph));
    EXPECT_EQ(graph.value(a.merged).type, before.value(a.merged).type);
    // 0.03: eager rounds the scores and the probabilities to the 8-bit significand of bfloat16
    // (2^-8 apart) before the product, the fused kernel neither: a few such steps on results of
    // size 1.
    at::manual_seed(23);
    for (int draw = 0; draw < 2; ++draw) {
      auto inputs = a.builder.example_inputs();
      inputs[0] = at::randn_like(inputs[0]);
      auto want = ir::interpret(before, inputs), got = ir::interpret(graph, inputs);
      EXPECT_FALSE(got[0].isnan().any().item<bool>()) << "draw " << draw;
      EXPECT_TRUE(at::allclose(got[0].to(at::kFloat), want[0].to(at::kFloat), 0.03, 0.03)) << "draw " << draw;
    }
  }
  // q, k and v in float32 with a float32 softmax cast down: not autocast's form. A float32 mask
  // beside float16: float16 cannot hold float32's lowest without changing a fully masked row. A
  // float32 mask that is data beside bfloat16: it may hide every key from a query
  // (AdditiveMasksFuseOnlyAsConstantsWhoseEveryRowSeesAKey).
  const std::pair<c10::ScalarType, bool> kept[] = {{at::kFloat, false}, {at::kHalf, false}, {at::kBFloat16, true}};
  for (const auto& [dtype, mask_is_input] : kept) {
    Attention a;
    build(a, Scale::Mul, Mask::Right, at::kFloat, dtype, mask_is_input);
    auto graph = a.builder.finish({a.merged});
    PassReport report;
    AttentionFusion(false).run(graph, report);
    EXPECT_EQ(report.counters["fused"], 0) << c10::toString(dtype);
  }
}

enum class Fill { MaskedFill, Where, WhereScalar };

// As build's, with the scaled scores filled where a bool mask says, as causal models write it:
// masked_fill(scores, masked, fill) or where(~masked, scores, fill), the mask a constant (a causal
// mask built from sizes and folded) or, with `mask_is_input`, an input.
ir::Graph build_filled(Attention& a, Fill form, const at::Tensor& masked, double fill, bool mask_is_input = false) {
  auto& b = a.builder;
  int x = b.input({kBatch, kTokens, kHeads * kDim});
  int mask = mask_is_input ? b.input(masked.sizes().vec(), at::kBool)
                           : b.constant(form == Fill::MaskedFill ? masked : masked.logical_not());
  const int v = scores_and_values(a, x);
  int scaled = b.op("aten::mul", "Scalar", {value("self", a.scores), real("other", 0.35)});
  int filled = -1;
  if (form == Fill::MaskedFill) {
    filled = b.op("aten::masked_fill", "Scalar", {value("self", scaled), value("mask", mask), real("value", fill)});
  } else if (form == Fill::Where) {
    filled = b.op("aten::where", "self",
                  {value("condition", mask), value("self", scaled), value("other", b.constant(at::scalar_tensor(fill)))});
  } else {
    filled = b.op("aten::where", "ScalarOther", {value("condition", mask), value("self", scaled), real("other", fill)});
  }
  attend(a, filled, v);
  return b.finish({a.merged});
}

// Key j hidden from query i when j > i.
at::Tensor causal_masked() { return at::ones({kTokens, kTokens}, at::TensorOptions().dtype(at::kBool)).triu(1); }

// Fills under a constant mask: PyTorch's causal mask becomes is_causal, another mask (a sliding
// window: query i sees keys i - 2 to i) a constant bool mask, one that hides nothing no mask.
TEST(AttentionFusion, ConstantFillsBecomeIsCausalABoolMaskOrNone) {
  const double lowest = static_cast<double>(std::numeric_limits<float>::lowest());
  const auto all = at::ones({kTokens, kTokens}, at::TensorOptions().dtype(at::kBool));
  struct Case {
    const char* name;
    at::Tensor masked;
    bool causal;
    bool has_mask;
  } cases[] = {{"causal", causal_masked(), true, false},
               {"sliding window", at::logical_or(causal_masked(), all.tril(-3)), false, true},
               {"nothing hidden", all.logical_not(), false, false}};
  for (const auto& c : cases) {
    for (auto form : {Fill::MaskedFill, Fill::Where, Fill::WhereScalar}) {
      for (double fill : {-std::numeric_limits<double>::infinity(), lowest}) {
        SCOPED_TRACE(::testing::Message() << c.name << ", form " << static_cast<int>(form) << ", fill " << fill);
        Attention a;
        const auto before = build_filled(a, form, c.masked, fill);
        const auto graph = fused_once(before);
        EXPECT_EQ(testing::count_nodes(graph, "aten::masked_fill") + testing::count_nodes(graph, "aten::where"), 0);
        EXPECT_NO_THROW(ir::verify(graph));
        const auto& fused = graph.nodes[graph.nodes.size() - 3];
        ASSERT_EQ(fused.op, "aten::scaled_dot_product_attention");
        EXPECT_EQ(ir::flag_arg(fused, "is_causal"), c.causal);
        const int mask = ir::tensor_arg(fused, "attn_mask");
        if (c.has_mask) {
          // A constant bool mask, true where a query attends.
          ASSERT_GE(mask, 0);
          EXPECT_EQ(graph.value(mask).role, ir::ValueRole::Constant);
          EXPECT_TRUE(at::equal(graph.constants.at(mask), c.masked.logical_not()));
        } else {
          EXPECT_LT(mask, 0);
        }
        expect_same_results(before, graph, a.builder.example_inputs());
      }
    }
  }
}

// A fill that would not vanish beside every row's largest score, a constant mask that hides every
// key from some query (eager: NaN or a uniform row; fused: 0), and a mask that is data (which rows
// it hides is unknown) all stay written out.
TEST(AttentionFusion, LeavesFillsThatCouldChangeAResult) {
  auto blind = causal_masked();
  blind.select(0, 2).fill_(true);  // query 2 sees no key
  struct Case {
    const char* name;
    at::Tensor masked;
    double fill;
    bool mask_is_input;
  } cases[] = {{"fill -1e4", causal_masked(), -1e4, false},
               {"a fully masked query", blind, -std::numeric_limits<double>::infinity(), false},
               {"a mask that is an input", causal_masked(), -std::numeric_limits<double>::infinity(), true}};
  for (const auto& c : cases) {
    for (auto form : {Fill::MaskedFill, Fill::Where}) {
      Attention a;
      auto graph = build_filled(a, form, c.masked, c.fill, c.mask_is_input);
      PassReport report;
      AttentionFusion(false).run(graph, report);
      EXPECT_EQ(report.counters["fused"], 0) << c.name << ", form " << static_cast<int>(form);
      EXPECT_EQ(testing::count_nodes(graph, "aten::softmax"), 1) << c.name;
    }
  }
}

TEST(AttentionFusion, LeavesPatternsWhoseIntermediatesAreReadElsewhere) {
  // The probabilities returned (models that output attentions), the scores returned.
  for (int returned = 0; returned < 2; ++returned) {
    Attention a;
    build(a, Scale::Mul, Mask::Right);
    auto graph = a.builder.finish({a.merged, returned == 0 ? a.probabilities : a.scores});
    PassReport report;
    AttentionFusion(false).run(graph, report);
    EXPECT_EQ(report.counters["fused"], 0) << "returned " << returned;
    EXPECT_EQ(testing::count_nodes(graph, "aten::softmax"), 1);
  }
  // A mask of another dtype: eager promotes the scores; the fused kernels would refuse it.
  Attention wide;
  build(wide, Scale::Mul, Mask::Right, at::kHalf);
  auto graph = wide.builder.finish({wide.merged});
  PassReport report;
  AttentionFusion(false).run(graph, report);
  EXPECT_EQ(report.counters["fused"], 0);
}

// Written-out attention in `dtype` with an additive mask of that dtype: an input, or the constant
// `constant_mask` [T, T].
// With `float32_softmax`, the softmax asked for float32 and its result cast back to `dtype` for the
// product, as Llama, Mistral and most of transformers' decoders write it in float16 or bfloat16.
ir::Graph build_masked(Attention& a, c10::ScalarType dtype, const std::optional<at::Tensor>& constant_mask,
                       bool float32_softmax = false) {
  auto& b = a.builder;
  int x = b.input({kBatch, kTokens, kHeads * kDim}, dtype);
  int mask = constant_mask ? b.constant(constant_mask->to(dtype)) : b.input({kBatch, 1, 1, kTokens}, dtype);
  const int v = scores_and_values(a, x);
  int scaled = b.op("aten::mul", "Scalar", {value("self", a.scores), real("other", 0.35)});
  int masked = b.op("aten::add", "Tensor", {value("self", scaled), value("other", mask), scalar("alpha", 1)});
  attend(a, masked, v, float32_softmax ? std::optional<c10::ScalarType>(dtype) : std::nullopt);
  return b.finish({a.merged});
}

// For a query whose every key is masked by the dtype's lowest, eager's written-out softmax weighs
// the keys evenly (in float16 after rounding each sum to a multiple of 32) and PyTorch's fused CUDA
// kernels give 0. So, without blind_rows (training), a mask that is data stays written out (it
// may hide every key from some query), as does a constant one with such a row; a constant causal
// mask, whose every query sees a key, fuses.
TEST(AttentionFusion, AdditiveMasksFuseOnlyAsConstantsWhoseEveryRowSeesAKey) {
  for (auto dtype : {at::kFloat, at::kHalf, at::kBFloat16}) {
    SCOPED_TRACE(c10::toString(dtype));
    const double lowest = dtype == at::kHalf       ? static_cast<double>(std::numeric_limits<c10::Half>::lowest())
                          : dtype == at::kBFloat16 ? static_cast<double>(std::numeric_limits<c10::BFloat16>::lowest())
                                                   : static_cast<double>(std::numeric_limits<float>::lowest());
    const auto causal = at::zeros({kTokens, kTokens}).masked_fill(causal_masked(), lowest);
    auto blind = causal.clone();
    blind.select(0, 3).fill_(lowest);  // query 3 sees no key
    const std::optional<at::Tensor> kept[] = {std::nullopt, blind};
    for (const auto& mask : kept) {
      Attention a;
      auto graph = build_masked(a, dtype, mask);
      PassReport report;
      AttentionFusion(false).run(graph, report);
      EXPECT_EQ(report.counters["fused"], 0) << (mask ? "a constant mask with a blind row" : "a mask that is an input");
      EXPECT_EQ(report.counters["additive_mask_kept"], 1);
      EXPECT_EQ(testing::count_nodes(graph, "aten::softmax"), 1);
    }
    Attention a;
    const auto before = build_masked(a, dtype, causal);
    PassReport report;
    auto graph = before;
    AttentionFusion(false).run(graph, report);
    EXPECT_EQ(report.counters["fused"], 1);
    EXPECT_EQ(report.counters.count("additive_mask_kept"), 0u);
    // Fresh inputs; 1e-5 (float32: another order of sums), 2e-2 (float16) and 6e-2 (bfloat16):
    // eager rounds the scores and the probabilities to the dtype before the product, the fused
    // kernel neither.
    at::manual_seed(29);
    for (int draw = 0; draw < 2; ++draw) {
      const std::vector<at::Tensor> inputs = {at::randn({kBatch, kTokens, kHeads * kDim}).to(dtype)};
      auto want = ir::interpret(before, inputs), got = ir::interpret(graph, inputs);
      const double tolerance = dtype == at::kFloat ? 1e-5 : dtype == at::kHalf ? 2e-2 : 6e-2;
      EXPECT_TRUE(at::allclose(got[0].to(at::kFloat), want[0].to(at::kFloat), tolerance, tolerance)) << "draw " << draw;
    }
  }
}

// In inference plans (blind_rows on) such a mask fuses too: the fused node, then
// attention_blind_rows, which computes the rows whose every key is masked again as written. The
// result is eager's on fresh masks, one with a fully masked batch element (its every query
// blind), one without; and for float32, whose blind rows eager weighs evenly, a blind row is the
// keys' mean value.
// Also in the form that asks the softmax for float32 and casts its result back: eager's float32
// softmax of the same 16-bit sums, rounded to q's dtype by the cast, is what the blind-rows op
// computes.
TEST(AttentionFusion, InInferenceAMaskThatMayHideEveryKeyFusesWithItsBlindRowsComputedAgain) {
  const std::pair<c10::ScalarType, bool> forms[] = {{at::kFloat, false}, {at::kBFloat16, false}, {at::kBFloat16, true}};
  for (const auto& [dtype, float32_softmax] : forms) {
    SCOPED_TRACE(::testing::Message() << c10::toString(dtype) << (float32_softmax ? ", the softmax in float32" : ""));
    const double lowest = dtype == at::kBFloat16 ? static_cast<double>(std::numeric_limits<c10::BFloat16>::lowest())
                                                 : static_cast<double>(std::numeric_limits<float>::lowest());
    Attention a;
    const auto before = build_masked(a, dtype, std::nullopt, float32_softmax);
    auto graph = before;
    PassReport report;
    AttentionFusion(/*cuda_only=*/false, /*blind_rows=*/true).run(graph, report);
    DeadCodeElimination().run(graph, report);
    EXPECT_EQ(report.counters["fused"], 1);
    EXPECT_EQ(report.counters["blind_rows_checked"], 1);
    EXPECT_EQ(report.counters.count("additive_mask_kept"), 0u);
    EXPECT_EQ(testing::count_nodes(graph, "aten::scaled_dot_product_attention"), 1);
    EXPECT_EQ(testing::count_nodes(graph, "zenith::attention_blind_rows"), 1);
    EXPECT_EQ(testing::count_nodes(graph, "aten::softmax"), 0);
    EXPECT_NO_THROW(ir::verify(graph));
    // The head merge after it stays a view of the fused layout; the module's result keeps its type.
    EXPECT_EQ(graph.value(a.merged).type, before.value(a.merged).type);
    at::manual_seed(31);
    for (int draw = 0; draw < 2; ++draw) {
      auto x = at::randn({kBatch, kTokens, kHeads * kDim}).to(dtype);
      auto mask = at::zeros({kBatch, 1, 1, kTokens}).masked_fill(at::rand({kBatch, 1, 1, kTokens}) < 0.4, lowest);
      mask.select(3, 0).fill_(0.0);
      if (draw == 1) mask.select(0, 1).fill_(lowest);  // batch element 1: every query blind
      const std::vector<at::Tensor> inputs = {x, mask.to(dtype)};
      auto want = ir::interpret(before, inputs), got = ir::interpret(graph, inputs);
      // 1e-5 (float32: another order of sums), 6e-2 (bfloat16: eager rounds the scores and the
      // probabilities to the dtype before the product, the fused kernel neither).
      const double tolerance = dtype == at::kFloat ? 1e-5 : 6e-2;
      EXPECT_TRUE(at::allclose(got[0].to(at::kFloat), want[0].to(at::kFloat), tolerance, tolerance)) << "draw " << draw;
      if (draw == 1 && dtype == at::kFloat) {
        // v = cos(x) split into heads: batch 1's every query gets the mean of its keys' values.
        const auto v = x.cos().select(0, 1).view({kTokens, kHeads, kDim});
        const auto mean = v.mean(0).reshape({kHeads * kDim});
        for (std::int64_t t = 0; t < kTokens; ++t) {
          EXPECT_TRUE(at::allclose(got[0].select(0, 1).select(0, t), mean, 1e-5, 1e-5)) << "query " << t;
        }
      }
    }
  }
}

// Autocast's form with a float32 mask: the masked scores are float32, not rounded to the
// products' dtype as the blind-rows op rounds them, so in inference too such a mask that is data
// stays written out.
TEST(AttentionFusion, InInferenceAFloat32MaskPromotingTheScoresStaysWrittenOut) {
  Attention a;
  build(a, Scale::Mul, Mask::Right, at::kFloat, at::kBFloat16, /*mask_is_input=*/true);
  auto graph = a.builder.finish({a.merged});
  PassReport report;
  AttentionFusion(/*cuda_only=*/false, /*blind_rows=*/true).run(graph, report);
  EXPECT_EQ(report.counters["fused"], 0);
  EXPECT_EQ(report.counters["additive_mask_kept"], 1);
  EXPECT_EQ(testing::count_nodes(graph, "zenith::attention_blind_rows"), 0);
}

TEST(AttentionFusion, KeepsTheTypeOfWhatTheModuleReturns) {
  // The context itself returned: the fused layout would reach the caller, so the pattern stays.
  Attention a;
  build(a, Scale::Mul, Mask::Right);
  auto graph = a.builder.finish({a.context});
  PassReport report;
  AttentionFusion(false).run(graph, report);
  EXPECT_EQ(report.counters["fused"], 0);
  EXPECT_EQ(report.counters["type_would_change"], 1);
  EXPECT_EQ(testing::count_nodes(graph, "aten::matmul"), 2);
}

TEST(AttentionFusion, OnlyCudaAttentionByDefault) {
  Attention a;
  build(a, Scale::Mul, Mask::Right);
  auto cpu = a.builder.finish({a.merged});
  PassReport report;
  AttentionFusion().run(cpu, report);
  EXPECT_EQ(report.counters["fused"], 0) << "the CPU graph is left to ATen's matrix products";
  for (auto& v : cpu.values) {
    if (v) v->type.device = c10::Device(c10::kCUDA, 0);
  }
  AttentionFusion().run(cpu, report);
  EXPECT_EQ(report.counters["fused"], 1);
}

}  // namespace
}  // namespace zenith::passes
