// What a plan's kernel steps may read early in the plan's CUDA graph (runtime/unwritten_inputs.h,
// zn_launch_args.inputs_unwritten): on a GPU the JIT CUDA plugin loads such a weight before the
// kernel before it has finished, so an input counted wrongly here would be read half-written.
#include <gtest/gtest.h>

#include <memory>

#include <ATen/ATen.h>

#include "runtime/derived_values.h"
#include "runtime/unwritten_inputs.h"
#include "unit/graph_builders.h"

namespace zenith {
namespace {

using testing::GraphBuilder;
using testing::scalar;
using testing::value;
using Entry = std::vector<std::uint8_t>;

// One step per node, in order; a view op runs on the host, as the partition places it.
std::shared_ptr<Plan> one_step_a_node(ir::Graph graph) {
  auto plan = std::make_shared<Plan>();
  plan->graph = std::move(graph);
  for (std::size_t n = 0; n < plan->graph.nodes.size(); ++n) {
    const auto& node = plan->graph.nodes[n];
    Step step;
    step.kind = node.op == "aten::t" ? Step::Kind::Host : Step::Kind::Kernel;
    step.nodes = {static_cast<int>(n)};
    step.inputs = node.input_ids();
    step.outputs = node.outputs;
    const bool in_place = node.op.back() == '_';
    step.output_aliases.assign(node.outputs.size(), in_place ? 0 : -1);
    for (int id : node.outputs) step.output_types.push_back(plan->graph.value(id).type);
    plan->steps.push_back(std::move(step));
  }
  return plan;
}

// Sibling weights concatenated (a derived step), a product of them, a view of a weight and its
// product, and a parameter the forward scales in place, with a value derived from it before.
struct Decoderish {
  int x, w, v, u, c, e, y, z, wt, o, scaled;
  std::shared_ptr<Plan> plan;
  Decoderish() {
    GraphBuilder b;
    x = b.input({2, 8});
    w = b.parameter({4, 8}, "w");
    v = b.parameter({4, 8}, "v");
    u = b.parameter({8, 8}, "u");
    c = b.op("aten::cat", "", {{"tensors", ir::ValueListRef{{w, v}}}, scalar("dim", 0)});
    e = b.op("aten::mul", "Scalar", {value("self", u), testing::real("other", 2.0)});
    y = b.op("aten::mm", "", {value("self", x), value("mat2", c)});
    z = b.op("aten::mm", "", {value("self", x), value("mat2", e)});
    wt = b.op("aten::t", "", {value("self", w)});
    o = b.op("aten::mm", "", {value("self", x), value("mat2", wt)});
    scaled = b.op("aten::mul_", "Scalar", {value("self", u), testing::real("other", 2.0)});
    plan = one_step_a_node(b.finish({y, z, o, scaled}));
  }
};

TEST(UnwrittenInputs, ParametersAndTheirViewsNoStepWritesAndWhatIsDerivedFromThem) {
  Decoderish d;
  auto derived = DerivedValues::of(d.plan, 3, std::make_shared<DerivedValueShare>());
  ASSERT_NE(derived, nullptr);
  ASSERT_TRUE(derived->derived(0)) << "the concatenation is computed before the graph runs";
  ASSERT_TRUE(derived->derived(1));
  const auto unwritten = unwritten_inputs(*d.plan, derived.get());
  ASSERT_EQ(unwritten.size(), d.plan->steps.size());
  EXPECT_EQ(unwritten[0], Entry{}) << "a derived step is not launched in the graph";
  EXPECT_EQ(unwritten[1], Entry{});
  EXPECT_EQ(unwritten[2], (Entry{0, 1})) << "x is the caller's; the kept concatenation of w and v nothing writes";
  EXPECT_EQ(unwritten[3], (Entry{0, 0})) << "derived from u, which the forward scales in place";
  EXPECT_EQ(unwritten[4], Entry{}) << "a host step launches nothing";
  EXPECT_EQ(unwritten[5], (Entry{0, 1})) << "a view of w";
  EXPECT_EQ(unwritten[6], (Entry{0})) << "the step writing u";
}

TEST(UnwrittenInputs, WithoutKeptValuesWhatAStepMakesIsWritten) {
  Decoderish d;
  const auto unwritten = unwritten_inputs(*d.plan, nullptr);
  EXPECT_EQ(unwritten[0], (Entry{1, 1})) << "the concatenation reads w and v";
  EXPECT_EQ(unwritten[1], (Entry{0})) << "u is written by a step of the plan";
  EXPECT_EQ(unwritten[2], (Entry{0, 0})) << "the concatenation runs in the graph, just before";
  EXPECT_EQ(unwritten[3], (Entry{0, 0}));
  EXPECT_EQ(unwritten[5], (Entry{0, 1}));
}

// The tensors a graph of Decoderish is recorded with: x, then the parameters w, v and u.
std::vector<at::Tensor> separate() { return {at::randn({2, 8}), at::randn({4, 8}), at::randn({4, 8}), at::randn({8, 8})}; }

TEST(UnwrittenInputs, MemorySharedByAReadOnlyValueAndAnotherInputIsSeen) {
  at::manual_seed(5);  // the values do not matter here, only which memory each tensor is
  Decoderish d;
  EXPECT_FALSE(read_only_memory_shared(*d.plan, separate()));

  auto inputs = separate();
  inputs[0] = inputs[1].narrow(0, 0, 2);  // the call passes rows of w as x
  EXPECT_TRUE(read_only_memory_shared(*d.plan, inputs)) << "x is the caller's, w is read early";

  inputs = separate();
  auto tied = at::randn({64});
  inputs[2] = tied.narrow(0, 0, 32).view({4, 8});  // v read early, u scaled in place: one memory
  inputs[3] = tied.view({8, 8});
  EXPECT_TRUE(read_only_memory_shared(*d.plan, inputs)) << "u is written, v shares its memory";

  inputs = separate();
  inputs[0] = inputs[3].narrow(0, 0, 2);  // x over u: neither is read early
  EXPECT_FALSE(read_only_memory_shared(*d.plan, inputs));
}

TEST(UnwrittenInputs, NothingUnwrittenKeepsTheShape) {
  Decoderish d;
  const auto unwritten = unwritten_inputs(*d.plan, nullptr);
  const auto none = nothing_unwritten(unwritten);
  ASSERT_EQ(none.size(), unwritten.size());
  for (std::size_t s = 0; s < none.size(); ++s) EXPECT_EQ(none[s], Entry(unwritten[s].size(), 0)) << "step " << s;
}

}  // namespace
}  // namespace zenith
