// Passes: each one's effect on hand-built graphs, and that the result still computes the same.
#include <gtest/gtest.h>

#include <set>
#include <tuple>

#include <ATen/ATen.h>

#include "core/interpreter.h"
#include "core/verifier.h"
#include "common/fresh_inputs.h"
#include "graph_builders.h"
#include "passes/cast_copies.h"
#include "passes/common_subexpression_elimination.h"
#include "passes/constant_folding.h"
#include "passes/dead_code_elimination.h"
#include "passes/effects.h"
#include "passes/fusion.h"
#include "passes/identity_elimination.h"
#include "passes/pass_manager.h"
#include "passes/reduction_input_casts.h"
#include "passes/round_trip_casts.h"
#include "passes/scalar_constant_dtypes.h"

namespace zenith::passes {
namespace {

using testing::cast;
using testing::GraphBuilder;
using testing::ints;
using testing::none;
using testing::real;
using testing::scalar;
using testing::value;

std::vector<at::Tensor> run(const ir::Graph& g, const std::vector<at::Tensor>& inputs) { return ir::interpret(g, inputs); }

// On the builder's example inputs and on fresh values of their signatures (seeded here): a pass
// that folded an input's value into a constant fails the second. 1e-6: the same ATen kernels on
// the same values; only a rewritten expression (x * 1 -> x, merged nodes) may round differently.
void expect_equal_results(const ir::Graph& before, const ir::Graph& after, const std::vector<at::Tensor>& inputs) {
  at::manual_seed(31);
  std::vector<at::Tensor> fresh;
  for (const auto& input : inputs) fresh.push_back(testing::fresh_like(input));
  const std::vector<at::Tensor>* draws[] = {&inputs, &fresh};
  for (const auto* values : draws) {
    const char* which = values == &inputs ? "example inputs" : "fresh inputs";
    auto a = run(before, *values), b = run(after, *values);
    ASSERT_EQ(a.size(), b.size()) << which;
    for (std::size_t i = 0; i < a.size(); ++i)
      EXPECT_TRUE(at::allclose(a[i], b[i], 1e-6, 1e-6)) << which << ", output " << i;
  }
}


TEST(Identities, DropoutsThatDrawNothingBecomeTheirInput) {
  GraphBuilder b;
  int x = b.input({4, 6});
  int eval = b.op("aten::dropout", "", {value("input", x), real("p", 0.1), {"train", false}});
  int h = b.op("aten::tanh", "", {value("self", eval)});
  int zero = b.op("aten::feature_dropout", "", {value("input", h), real("p", 0.0), {"train", true}});
  int drawn = b.op("aten::dropout", "", {value("input", zero), real("p", 0.5), {"train", true}});
  int last = b.op("aten::alpha_dropout", "", {value("input", h), real("p", 0.3), {"train", false}});
  auto g = b.finish({drawn, last, eval});
  auto before = g;
  PassReport report;
  IdentityElimination().run(g, report);
  EXPECT_EQ(report.counters["removed"], 3);
  ASSERT_EQ(g.nodes.size(), 2u);
  EXPECT_EQ(g.nodes[0].op, "aten::tanh");
  EXPECT_EQ(g.nodes[0].input_ids(), std::vector<int>{x});
  EXPECT_EQ(g.nodes[1].op, "aten::dropout") << "a dropout that draws stays";
  EXPECT_EQ(g.nodes[1].input_ids(), std::vector<int>{h});
  // As eager: the outputs are the inputs themselves.
  EXPECT_EQ(g.outputs[1], h);
  EXPECT_EQ(g.outputs[2], x);
  EXPECT_NO_THROW(ir::verify(g));
  // The drawing dropout makes the first output random: compare the others.
  auto inputs = b.example_inputs();
  auto want = run(before, inputs), got = run(g, inputs);
  EXPECT_TRUE(got[1].equal(want[1]));
  EXPECT_TRUE(got[2].equal(want[2]));
}

// nn.Dropout(inplace=True) in evaluation mode (torchvision's EfficientNet heads): the in-place
// form writes nothing and returns `self`; a training model's gradient must not stop at it.
TEST(Identities, InPlaceDropoutsThatDrawNothingBecomeTheirInput) {
  GraphBuilder b;
  int x = b.input({4, 6});
  int h = b.op("aten::tanh", "", {value("self", x)});
  int eval = b.op("aten::dropout_", "", {value("self", h), real("p", 0.2), {"train", false}});
  int y = b.op("aten::relu", "", {value("self", eval)});
  auto g = b.finish({y});
  auto before = g;
  PassReport report;
  IdentityElimination().run(g, report);
  EXPECT_EQ(report.counters["removed"], 1);
  ASSERT_EQ(g.nodes.size(), 2u);
  EXPECT_EQ(g.nodes[1].op, "aten::relu");
  EXPECT_EQ(g.nodes[1].input_ids(), std::vector<int>{h});
  EXPECT_NO_THROW(ir::verify(g));
  auto inputs = b.example_inputs();
  EXPECT_TRUE(run(g, inputs)[0].equal(run(before, inputs)[0]));

  GraphBuilder drawing;
  int z = drawing.input({4, 6});
  int kept = drawing.op("aten::dropout_", "", {value("self", z), real("p", 0.2), {"train", true}});
  auto d = drawing.finish({kept});
  IdentityElimination().run(d, report);
  EXPECT_EQ(report.counters["removed"], 0);
  EXPECT_EQ(testing::count_nodes(d, "aten::dropout_"), 1) << "an in-place dropout that draws stays";
}

TEST(Dce, RemovesUnusedPureNodesOnly) {
  GraphBuilder b;
  int x = b.input({4, 4});
  b.op("aten::exp", "", {value("self", x)});                                   // unused: dropped
  b.op("aten::dropout", "", {value("self", x), real("p", 0.5), {"train", true}});  // random: kept
  int y = b.op("aten::relu", "", {value("self", x)});
  auto g = b.finish({y});
  PassReport report;
  DeadCodeElimination().run(g, report);
  EXPECT_EQ(report.counters["removed"], 1);
  EXPECT_EQ(testing::count_nodes(g, "aten::exp"), 0);
  EXPECT_EQ(testing::count_nodes(g, "aten::dropout"), 1);
}

TEST(Dce, KeepsInPlaceWritesToInputs) {
  GraphBuilder b;
  int x = b.input({4});
  int y = b.input({4});
  b.op("aten::add_", "Tensor", {value("self", x), value("other", y), scalar("alpha", 1)});  // result unused, but x changes
  int z = b.op("aten::neg", "", {value("self", y)});
  auto g = b.finish({z});
  PassReport report;
  DeadCodeElimination().run(g, report);
  EXPECT_EQ(testing::count_nodes(g, "aten::add_"), 1);
}

TEST(Effects, WritesIntoTheForwardsOwnTensorsAreNotVisible) {
  // Probing at other sizes (symbolic plans) must not repeat what the caller can see: writes into
  // arguments, parameters or constants (directly or through a view) and random draws. Writes
  // into tensors the forward made itself are its own.
  GraphBuilder b;
  int x = b.input({4, 4});
  int w = b.parameter({4, 4}, "w");
  int fresh = b.op("aten::relu", "", {value("self", x)});
  int own = b.op("aten::mul_", "Tensor", {value("self", fresh), value("other", x)});
  int view = b.op("aten::view", "", {value("self", w), {"size", std::vector<std::int64_t>{16}}});
  int through_view = b.op("aten::add_", "Scalar", {value("self", view), real("other", 1.0), scalar("alpha", 1)});
  int random = b.op("aten::rand_like", "", {value("self", x), testing::none("dtype"), testing::none("layout"),
                                            testing::none("device"), testing::none("pin_memory"),
                                            testing::none("memory_format")});
  auto g = b.finish({own, through_view, random});
  auto effects = passes::analyse_effects(g);
  ASSERT_EQ(effects.node_has_visible_effect.size(), 5u);
  EXPECT_FALSE(effects.node_has_visible_effect[0]) << "relu";
  EXPECT_TRUE(effects.node_has_effect[1]) << "mul_ writes";
  EXPECT_FALSE(effects.node_has_visible_effect[1]) << "but into relu's result";
  EXPECT_FALSE(effects.node_has_visible_effect[2]) << "a view writes nothing";
  EXPECT_TRUE(effects.node_has_visible_effect[3]) << "add_ through a view of the parameter";
  EXPECT_TRUE(effects.node_has_visible_effect[4]) << "rand_like draws";
}

TEST(Cse, MergesIdenticalPureNodesTransitively) {
  GraphBuilder b;
  int x = b.input({8});
  int a1 = b.op("aten::sigmoid", "", {value("self", x)});
  int a2 = b.op("aten::sigmoid", "", {value("self", x)});
  int b1 = b.op("aten::mul", "Tensor", {value("self", a1), value("other", x)});
  int b2 = b.op("aten::mul", "Tensor", {value("self", a2), value("other", x)});
  int out = b.op("aten::sub", "Tensor", {value("self", b1), value("other", b2), scalar("alpha", 1)});
  auto g = b.finish({out});
  auto before = g;
  PassReport report;
  CommonSubexpressionElimination().run(g, report);
  EXPECT_EQ(report.counters["merged"], 2);
  EXPECT_EQ(testing::count_nodes(g, "aten::sigmoid"), 1);
  EXPECT_EQ(testing::count_nodes(g, "aten::mul"), 1);
  expect_equal_results(before, g, b.example_inputs());
}

// A value one of two merged nodes computes at every call (ir::Node::per_call: too large to keep)
// is computed at every call however it came: the surviving node takes the flag.
TEST(Cse, AMergedNodeRunsAtEveryCallWhereEitherDid) {
  GraphBuilder b;
  int w = b.parameter({8, 4}, "w");
  int kept = b.op("aten::mul", "Scalar", {value("self", w), real("other", 2.0)});
  int each_call = b.op("aten::mul", "Scalar", {value("self", w), real("other", 2.0)});
  auto g = b.finish({kept, each_call});
  g.nodes.back().per_call = true;
  PassReport report;
  CommonSubexpressionElimination().run(g, report);
  EXPECT_EQ(report.counters["merged"], 1);
  ASSERT_EQ(testing::count_nodes(g, "aten::mul"), 1);
  EXPECT_TRUE(g.nodes.back().per_call);
}

TEST(Cse, DoesNotMergeRandomOpsOrDifferentArguments) {
  GraphBuilder b;
  int x = b.input({64});
  int d1 = b.op("aten::dropout", "", {value("self", x), real("p", 0.5), {"train", true}});
  int d2 = b.op("aten::dropout", "", {value("self", x), real("p", 0.5), {"train", true}});
  int s1 = b.op("aten::add", "Scalar", {value("self", x), scalar("other", 1), scalar("alpha", 1)});
  int s2 = b.op("aten::add", "Scalar", {value("self", x), real("other", 1.0), scalar("alpha", 1)});
  auto g = b.finish({d1, d2, s1, s2});
  PassReport report;
  CommonSubexpressionElimination().run(g, report);
  EXPECT_EQ(report.counters["merged"], 0);
}

// Attention with a dropout probability draws its masks (the fused kernels draw them inside), so
// two equal calls are two draws; without one they are one value.
TEST(Cse, MergesAttentionOnlyWithoutDropout) {
  for (double p : {0.0, 0.1}) {
    GraphBuilder b;
    int q = b.input({2, 2, 4, 8});
    int k = b.input({2, 2, 4, 8});
    int v = b.input({2, 2, 4, 8});
    auto attention = [&] {
      return b.op("aten::scaled_dot_product_attention", "",
                  {value("query", q), value("key", k), value("value", v), none("attn_mask"), real("dropout_p", p),
                   {"is_causal", false}, none("scale"), {"enable_gqa", false}});
    };
    int a1 = attention();
    int a2 = attention();
    auto g = b.finish({a1, a2});
    PassReport report;
    CommonSubexpressionElimination().run(g, report);
    EXPECT_EQ(report.counters["merged"], p == 0.0 ? 1 : 0) << "dropout_p " << p;
  }
}

TEST(Cse, DoesNotMergeReadsAcrossAMutation) {
  GraphBuilder b;
  int x = b.input({4});
  int r1 = b.op("aten::neg", "", {value("self", x)});
  b.op("aten::mul_", "Scalar", {value("self", x), real("other", 2.0)});
  int r2 = b.op("aten::neg", "", {value("self", x)});
  auto g = b.finish({r1, r2});
  PassReport report;
  CommonSubexpressionElimination().run(g, report);
  EXPECT_EQ(report.counters["merged"], 0);
  EXPECT_EQ(testing::count_nodes(g, "aten::neg"), 2);
}

TEST(ConstantFolding, FoldsConstantSubgraphsButNotParameters) {
  GraphBuilder b;
  int x = b.input({4, 4});
  int w = b.parameter({4, 4}, "weight");
  int c = b.constant(at::ones({4, 4}));
  int folded1 = b.op("aten::mul", "Scalar", {value("self", c), real("other", 3.0)});
  int folded2 = b.op("aten::exp", "", {value("self", folded1)});
  int live = b.op("aten::mul", "Tensor", {value("self", w), value("other", folded2)});  // reads a parameter
  int out = b.op("aten::add", "Tensor", {value("self", x), value("other", live), scalar("alpha", 1)});
  auto g = b.finish({out});
  auto before = g;
  PassReport report;
  ConstantFolding().run(g, report);
  EXPECT_EQ(report.counters["folded"], 2);
  EXPECT_EQ(testing::count_nodes(g, "aten::exp"), 0);
  EXPECT_EQ(g.nodes.size(), 2u);
  auto inputs = b.example_inputs();
  expect_equal_results(before, g, inputs);
  // The parameter stays live: a new weight changes the result.
  inputs[1] = inputs[1] * 2;
  expect_equal_results(before, g, inputs);
}

TEST(ConstantFolding, LeavesRandomAndLargeResultsAlone) {
  GraphBuilder b;
  int c = b.constant(at::ones({1024, 1024}));
  int d = b.op("aten::dropout", "", {value("self", c), real("p", 0.5), {"train", true}});
  int big = b.op("aten::mul", "Scalar", {value("self", c), real("other", 2.0)});
  auto g = b.finish({d, big});
  PassReport report;
  ConstantFolding(/*max_bytes=*/1024).run(g, report);
  EXPECT_EQ(report.counters["folded"], 0);
  EXPECT_EQ(report.counters["too_large"], 1);
}

// Falcon divides its float32 attention scores by a 0-d float64 constant (math.sqrt of the head
// size, traced as a tensor); generated kernels load no float64.
TEST(ScalarConstantDtypes, AFloat64ScalarThatFloat32ArithmeticReadsBecomesFloat32) {
  GraphBuilder b;
  int x = b.input({3, 5});
  int c = b.constant(at::scalar_tensor(5.656854249492381, at::kDouble));
  int q = b.op("aten::div", "Tensor", {value("self", x), value("other", c)});
  int scaled = b.op("aten::mul", "Tensor", {value("self", c), value("other", q)});
  int wide = b.op("aten::add", "Tensor", {value("self", c), value("other", c), scalar("alpha", 1)});  // float64
  int magnitude = b.op("aten::abs", "", {value("self", x)});
  int power = b.op("aten::pow", "Tensor_Tensor", {value("self", magnitude), value("other", c)});  // not ours to narrow
  auto g = b.finish({scaled, wide, power});
  auto before = g;
  PassReport report;
  ScalarConstantDtypes().run(g, report);
  EXPECT_EQ(report.counters["narrowed"], 2);
  EXPECT_NO_THROW(ir::verify(g));
  auto dtype_of = [&](const char* op, const char* arg) {
    for (const auto& node : g.nodes) {
      if (node.op == op) return g.value(std::get<ir::ValueRef>(node.arg(arg)->value).id).type.dtype;
    }
    return at::kByte;
  };
  EXPECT_EQ(dtype_of("aten::div", "other"), at::kFloat);
  EXPECT_EQ(dtype_of("aten::mul", "self"), at::kFloat);
  EXPECT_EQ(dtype_of("aten::add", "self"), at::kDouble);
  EXPECT_EQ(dtype_of("aten::pow", "other"), at::kDouble);
  EXPECT_EQ(g.value(g.outputs[1]).type.dtype, at::kDouble);
  expect_equal_results(before, g, b.example_inputs());
  // The division and the product fuse, reading nothing in float64 (the CUDA kernels load none).
  PassReport fusion;
  ElementwiseFusion().run(g, fusion);
  std::set<int> groups;
  for (const auto& node : g.nodes) {
    if (node.op == "aten::div" || node.op == "aten::mul") groups.insert(node.fusion_group);
  }
  EXPECT_EQ(groups.size(), 1u);
  EXPECT_GE(*groups.begin(), 0);
}

TEST(RoundTripCasts, AWideningCastAndBackIsTheValueItself) {
  for (const auto dtype : {at::kBFloat16, at::kHalf}) {
    GraphBuilder b;
    int x = b.input({4, 6}, dtype);
    int wide = cast(b, x, at::kFloat);
    int back = cast(b, wide, dtype);
    int sum = b.op("aten::add", "Tensor", {value("self", back), value("other", x), scalar("alpha", 1)});
    int scaled = b.op("aten::mul", "Scalar", {value("self", wide), real("other", 3.0)});  // keeps the widening
    auto g = b.finish({sum, scaled});
    auto before = g;
    PassReport report;
    RoundTripCastElimination().run(g, report);
    EXPECT_EQ(report.counters["removed"], 1) << c10::toString(dtype);
    const auto& add = g.nodes[static_cast<std::size_t>(g.producers()[sum])];
    EXPECT_EQ(add.input_ids(), (std::vector<int>{x, x})) << "the add reads x where it read the round trip";
    PassReport dce;
    DeadCodeElimination().run(g, dce);
    EXPECT_EQ(testing::count_nodes(g, "aten::to"), 1) << "the cast back is dead; the widening one is read";
    // Exactly: every bfloat16 and float16 value survives float32.
    expect_equal_results(before, g, b.example_inputs());
  }
}

TEST(RoundTripCasts, LeavesNarrowingFirstReturnedResultsAndWrittenValuesAlone) {
  GraphBuilder b;
  int x = b.input({4, 6});
  int narrow = cast(b, x, at::kBFloat16);  // float32 -> bfloat16 -> float32 rounds
  int rounded = cast(b, narrow, at::kFloat);
  int h = b.input({4, 6}, at::kHalf);
  int returned = cast(b, cast(b, h, at::kFloat), at::kHalf);  // returned: the caller would get h itself
  int y = b.input({3}, at::kBFloat16);
  int y_back = cast(b, cast(b, y, at::kDouble), at::kBFloat16);
  int written = b.op("aten::add_", "Tensor", {value("self", y_back), value("other", y), scalar("alpha", 1)});
  int z = b.op("aten::mul", "Tensor", {value("self", rounded), value("other", x)});
  auto g = b.finish({z, returned, written});
  PassReport report;
  RoundTripCastElimination().run(g, report);
  EXPECT_EQ(report.counters["removed"], 0);
}

int sum_rows(GraphBuilder& b, int x, std::vector<std::int64_t> dims) {
  return b.op("aten::sum", "dim_IntList",
              {value("self", x), ints("dim", std::move(dims)), {"keepdim", false}, none("dtype")});
}

TEST(ReductionCasts, ASumOfAWideningCastReadsTheNarrowValueInTheWideDtype) {
  for (const auto dtype : {at::kBFloat16, at::kHalf}) {
    GraphBuilder b;
    int x = b.input({4, 6, 8}, dtype);
    int summed = sum_rows(b, cast(b, x, at::kFloat), {0, 1});
    int averaged = b.op("aten::mean", "dim",
                        {value("self", cast(b, x, at::kDouble)), ints("dim", {2}), {"keepdim", true}, none("dtype")});
    auto g = b.finish({summed, averaged});
    auto before = g;
    PassReport report;
    ReductionInputCasts().run(g, report);
    EXPECT_EQ(report.counters["folded"], 2) << c10::toString(dtype);
    const std::pair<int, at::ScalarType> reductions[] = {{summed, at::kFloat}, {averaged, at::kDouble}};
    for (const auto& [result, wide] : reductions) {
      const auto& reduction = g.nodes[static_cast<std::size_t>(g.producers()[result])];
      EXPECT_EQ(reduction.input_ids(), std::vector<int>{x}) << reduction.op << " reads x itself";
      EXPECT_EQ(std::get<std::int64_t>(reduction.arg("dtype")->value), static_cast<std::int64_t>(wide));
    }
    PassReport dce;
    DeadCodeElimination().run(g, dce);
    EXPECT_EQ(testing::count_nodes(g, "aten::to"), 0) << "the casts are dead";
    // sum(x, dtype=float32) is defined as sum(x.to(float32)), mean likewise: the same values reduced.
    expect_equal_results(before, g, b.example_inputs());
  }
}

TEST(ReductionCasts, LeavesNarrowingSharedAndTypedReductionsAlone) {
  GraphBuilder b;
  int x = b.input({4, 6});
  int narrowed = sum_rows(b, cast(b, x, at::kBFloat16), {0});  // float32 -> bfloat16 rounds: not x's values
  int h = b.input({4, 6}, at::kHalf);
  int shared = cast(b, h, at::kFloat);
  int first = sum_rows(b, shared, {0});
  int other_reader = b.op("aten::mul", "Scalar", {value("self", shared), real("other", 2.0)});
  int y = b.input({4, 6}, at::kBFloat16);
  int typed = b.op("aten::sum", "dim_IntList",
                   {value("self", cast(b, y, at::kFloat)), ints("dim", {1}), {"keepdim", false},
                    scalar("dtype", static_cast<std::int64_t>(at::kDouble))});
  auto g = b.finish({narrowed, first, other_reader, typed});
  PassReport report;
  ReductionInputCasts().run(g, report);
  EXPECT_EQ(report.counters["folded"], 0);
}

TEST(CastCopies, CastsToAnotherDtypeBecomeCopiesThatFuse) {
  GraphBuilder b;
  int product = b.input({4, 6}, at::kBFloat16);
  int bias = b.input({6});
  // As LibTorch's linear under autocast leaves it: a float32 bias promotes the sum, cast back.
  int promoted = b.op("aten::add", "Tensor", {value("self", product), value("other", bias), scalar("alpha", 1)});
  int rounded = cast(b, promoted, at::kBFloat16);
  int same = cast(b, rounded, at::kBFloat16);  // an alias of its input: stays
  auto g = b.finish({same});
  auto before = g;
  PassReport report;
  CastCopies().run(g, report);
  EXPECT_EQ(report.counters["rewritten"], 1);
  EXPECT_EQ(testing::count_nodes(g, "aten::_to_copy"), 1);
  EXPECT_EQ(testing::count_nodes(g, "aten::to"), 1);
  EXPECT_NO_THROW(ir::verify(g));
  expect_equal_results(before, g, b.example_inputs());
  PassReport fusion;
  ElementwiseFusion().run(g, fusion);
  EXPECT_EQ(fusion.counters["groups"], 1);
  EXPECT_EQ(fusion.counters["fused_nodes"], 2) << "the add and its cast, one kernel";
}

TEST(PassManager, ReportsEveryPassAndKeepsResults) {
  GraphBuilder b;
  int x = b.input({3, 5});
  int c = b.constant(at::full({3, 5}, 2.0));
  int k = b.op("aten::sqrt", "", {value("self", c)});
  int a1 = b.op("aten::tanh", "", {value("self", x)});
  int a2 = b.op("aten::tanh", "", {value("self", x)});
  b.op("aten::cos", "", {value("self", x)});
  int m = b.op("aten::mul", "Tensor", {value("self", a1), value("other", k)});
  int out = b.op("aten::add", "Tensor", {value("self", m), value("other", a2), scalar("alpha", 1)});
  auto g = b.finish({out});
  auto before = g;
  auto before_copy = g;
  auto reports = PassManager::default_pipeline({}, /*inference=*/true).run(g);
  // Per pass, in pipeline order: its name and one counter's expected value.
  const std::vector<std::tuple<std::string, std::string, std::int64_t>> expected = {
      {"identities", "removed", 0},
      {"fuse_convolution_epilogue", "fused", 0},
      {"decompose_batch_norm", "decomposed", 0},
      {"fold_constants", "folded", 1},
      {"scalar_constant_dtypes", "narrowed", 0},
      {"scalar_constants_on_device", "moved", 0},
      {"cse", "merged", 1},
      {"round_trip_casts", "removed", 0},
      {"reduction_casts", "folded", 0},
      {"fuse_attention", "fused", 0},
      {"grouped_query_attention", "ungrouped", 0},
      {"rotary_embedding", "rewritten", 0},
      {"concatenate_sibling_products", "concatenated", 0},
      {"dce", "removed", 1},
      {"cast_copies", "rewritten", 0},
      {"fuse_elementwise", "groups", 1},  // tanh -> mul -> add
  };
  ASSERT_EQ(reports.size(), expected.size());
  for (std::size_t k = 0; k < expected.size(); ++k) {
    const auto& [name, counter, value] = expected[k];
    EXPECT_EQ(reports[k].name, name);
    EXPECT_EQ(reports[k].counters[counter], value) << name << " " << counter;
  }
  EXPECT_EQ(reports[15].counters["fused_nodes"], 3);
  EXPECT_EQ(reports[3].nodes_before, 6);
  EXPECT_EQ(reports[13].nodes_after, 3);
  // A training step's forward and backward: none of the four inference rewrites.
  const auto training = PassManager::default_pipeline({}, /*inference=*/false).run(before_copy);
  EXPECT_EQ(training.size(), expected.size() - 4);
  expect_equal_results(before, g, b.example_inputs());
}

}  // namespace
}  // namespace zenith::passes
