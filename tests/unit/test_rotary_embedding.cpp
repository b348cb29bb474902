// Rotary embedding (passes/rotary_embedding.h): x * cos + cat([-x2, x1], -1) * sin, with the
// halves taken by narrow (LibTorch's form) or slice (a traced Python model's), becomes elementwise
// ops over x viewed as [..., 2, half], which the fusion pass makes one group. Other concatenations
// are left alone. Checked against the original graph on fresh draws of every input.
#include <gtest/gtest.h>

#include <limits>
#include <set>

#include <ATen/ATen.h>

#include "core/interpreter.h"
#include "core/verifier.h"
#include "graph_builders.h"
#include "passes/dead_code_elimination.h"
#include "passes/fusion.h"
#include "passes/rotary_embedding.h"

namespace zenith::passes {
namespace {

using testing::GraphBuilder;
using testing::ints;
using testing::scalar;
using testing::value;

constexpr std::int64_t kBatch = 2, kTokens = 3, kHeads = 4, kDim = 8;

enum class Halves { Narrow, Slice, Swapped };

int half(GraphBuilder& b, int x, bool first, Halves form) {
  const std::int64_t h = kDim / 2;
  if (form == Halves::Slice) {
    // Python's x[..., h:] traces with the largest int64 as its end.
    return b.op("aten::slice", "Tensor", {value("self", x), scalar("dim", 3), scalar("start", first ? 0 : h),
                                          scalar("end", first ? h : std::numeric_limits<std::int64_t>::max()),
                                          scalar("step", 1)});
  }
  return b.op("aten::narrow", "", {value("self", x), scalar("dim", -1), scalar("start", first ? 0 : h), scalar("length", h)});
}

struct Rotary {
  GraphBuilder builder;
  int rotated = -1, out = -1;
};

// q [B, T, H*D] split into heads (a strided view), rotated by tables [T, D], then read by a product.
void build(Rotary& r, Halves form) {
  auto& b = r.builder;
  int projected = b.input({kBatch, kTokens, kHeads * kDim});
  int cos = b.input({kTokens, kDim});
  int sin = b.input({kTokens, kDim});
  int split = b.op("aten::view", "", {value("self", projected), ints("size", {kBatch, kTokens, kHeads, kDim})});
  int x = b.op("aten::transpose", "int", {value("self", split), scalar("dim0", 1), scalar("dim1", 2)});
  int first = half(b, x, true, form), second = half(b, x, false, form);
  int negated = b.op("aten::neg", "", {value("self", second)});
  const auto halves = form == Halves::Swapped ? ir::ValueListRef{{first, negated}} : ir::ValueListRef{{negated, first}};
  int turned = b.op("aten::cat", "", {{"tensors", halves}, scalar("dim", -1)});
  int plain = b.op("aten::mul", "Tensor", {value("self", x), value("other", cos)});
  int scaled = b.op("aten::mul", "Tensor", {value("self", sin), value("other", turned)});
  r.rotated = b.op("aten::add", "Tensor", {value("self", plain), value("other", scaled), scalar("alpha", 1)});
  int kt = b.op("aten::transpose", "int", {value("self", r.rotated), scalar("dim0", -2), scalar("dim1", -1)});
  r.out = b.op("aten::matmul", "", {value("self", r.rotated), value("other", kt)});
}

// Every input drawn again, twice; 1e-5: the same products and sum per element, in float32.
void expect_same_results(const ir::Graph& before, const ir::Graph& after, const std::vector<at::Tensor>& examples) {
  at::manual_seed(37);
  for (int draw = 0; draw < 2; ++draw) {
    std::vector<at::Tensor> inputs;
    for (const auto& example : examples) inputs.push_back(at::randn_like(example));
    auto want = ir::interpret(before, inputs), got = ir::interpret(after, inputs);
    ASSERT_EQ(want.size(), got.size());
    EXPECT_TRUE(at::allclose(got[0], want[0], 1e-5, 1e-5)) << "draw " << draw;
  }
}

TEST(RotaryEmbedding, TheRotationBecomesOneElementwiseGroup) {
  for (auto form : {Halves::Narrow, Halves::Slice}) {
    SCOPED_TRACE(form == Halves::Narrow ? "narrow" : "slice");
    Rotary r;
    build(r, form);
    const auto before = r.builder.finish({r.out});
    auto graph = before;
    PassReport report, removed, fused;
    RotaryEmbedding(/*cuda_only=*/false).run(graph, report);
    EXPECT_EQ(report.counters["rewritten"], 1);
    DeadCodeElimination().run(graph, removed);
    EXPECT_EQ(testing::count_nodes(graph, "aten::cat"), 0);
    EXPECT_NO_THROW(ir::verify(graph));
    EXPECT_EQ(graph.value(r.out).type, before.value(r.out).type);
    expect_same_results(before, graph, r.builder.example_inputs());
    // The negation, the choice of halves, both products and the sum: one kernel.
    ElementwiseFusion().run(graph, fused);
    std::set<int> groups;
    for (const auto& node : graph.nodes) {
      if (node.op == "aten::neg" || node.op == "aten::where" || node.op == "aten::mul" || node.op == "aten::add") {
        groups.insert(node.fusion_group);
      }
    }
    EXPECT_EQ(groups.size(), 1u);
    EXPECT_GE(*groups.begin(), 0);
  }
}

TEST(RotaryEmbedding, LeavesOtherConcatenations) {
  Rotary r;
  build(r, Halves::Swapped);  // cat([x1, -x2]): a rotation the other way, not this pattern
  auto graph = r.builder.finish({r.out});
  PassReport report;
  RotaryEmbedding(false).run(graph, report);
  EXPECT_EQ(report.counters["rewritten"], 0);
  EXPECT_EQ(testing::count_nodes(graph, "aten::cat"), 1);
}

}  // namespace
}  // namespace zenith::passes
