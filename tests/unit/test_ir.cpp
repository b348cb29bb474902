// The IR: values, nodes, verifier, printer, op registry and the schema-derived alias facts.
#include <gtest/gtest.h>

#include "core/dlpack_view.h"
#include "core/graph.h"
#include "core/op_registry.h"
#include "core/op_schema.h"
#include "core/printer.h"
#include "core/verifier.h"
#include "zenith/error.h"

namespace zenith::ir {
namespace {

TensorType float_type(std::vector<std::int64_t> sizes) {
  TensorType t;
  t.sizes = sizes;
  t.strides.assign(sizes.size(), 1);
  for (int d = static_cast<int>(sizes.size()) - 2; d >= 0; --d) t.strides[d] = t.strides[d + 1] * sizes[d + 1];
  return t;
}

// x -> relu -> y ; returns the graph.
Graph relu_graph() {
  Graph g;
  int x = g.add_value(float_type({2, 3}), ValueRole::Input, "x");
  int y = g.add_value(float_type({2, 3}), ValueRole::Intermediate);
  g.inputs = {x};
  g.nodes.push_back(Node{"aten::relu", "", {{"self", ValueRef{x}}}, {y}, false});
  g.outputs = {y};
  return g;
}

void expect_verifier_error(const Graph& g, const std::string& fragment) {
  try {
    verify(g);
    FAIL() << "verify accepted a graph that should fail with: " << fragment;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(Ir, ValidGraphVerifies) { EXPECT_NO_THROW(verify(relu_graph())); }

TEST(Ir, VerifierRejectsUseBeforeDefinition) {
  auto g = relu_graph();
  int z = g.add_value(float_type({2, 3}), ValueRole::Intermediate);
  g.nodes.insert(g.nodes.begin(), Node{"aten::neg", "", {{"self", ValueRef{g.outputs[0]}}}, {z}, false});
  expect_verifier_error(g, "before it is defined");
}

TEST(Ir, VerifierRejectsDoubleDefinition) {
  auto g = relu_graph();
  g.nodes.push_back(g.nodes[0]);
  expect_verifier_error(g, "a second time");
}

TEST(Ir, VerifierRejectsMissingValueAndBadOutput) {
  auto g = relu_graph();
  g.nodes[0].args[0].value = ValueRef{42};
  expect_verifier_error(g, "does not exist");
  auto h = relu_graph();
  h.outputs = {7};
  expect_verifier_error(h, "never defined");
}

TEST(Ir, VerifierRejectsConstantWithoutDataAndBadStructure) {
  auto g = relu_graph();
  g.add_value(float_type({1}), ValueRole::Constant);
  expect_verifier_error(g, "has no data");
  EXPECT_NO_THROW(verify(g, /*allow_missing_constant_data=*/true));
  auto h = relu_graph();
  h.output_structure.index = 3;
  expect_verifier_error(h, "output structure");
}

TEST(Ir, ProducersConsumersAndReplaceUses) {
  auto g = relu_graph();
  int x = g.inputs[0], y = g.outputs[0];
  EXPECT_EQ(g.producers()[y], 0);
  EXPECT_EQ(g.producers()[x], -1);
  EXPECT_EQ(g.consumers()[x], std::vector<int>{0});
  int w = g.add_value(float_type({2, 3}), ValueRole::Input, "w");
  g.inputs.push_back(w);
  g.replace_uses(x, w);
  EXPECT_EQ(g.nodes[0].input_ids(), std::vector<int>{w});
  g.remove_unused_values();
  EXPECT_TRUE(g.has_value(x));  // still an input
}

TEST(Ir, PrinterShowsOpsTypesAndRoles) {
  auto text = to_text(relu_graph());
  EXPECT_NE(text.find("aten::relu(self=%0)"), std::string::npos) << text;
  EXPECT_NE(text.find("float32[2, 3]"), std::string::npos) << text;
  EXPECT_NE(text.find("(input x)"), std::string::npos) << text;
  EXPECT_NE(text.find("return (%1)"), std::string::npos) << text;
}

TEST(Ir, RegistryCategories) {
  EXPECT_EQ(op_info("aten::add").category, OpCategory::Elementwise);
  EXPECT_EQ(op_info("aten::add_").category, OpCategory::Elementwise);
  EXPECT_EQ(op_info("aten::softmax").category, OpCategory::Reduction);
  EXPECT_EQ(op_info("aten::addmm").category, OpCategory::MatrixProduct);
  EXPECT_EQ(op_info("aten::transpose").category, OpCategory::View);
  EXPECT_EQ(op_info("aten::conv2d").category, OpCategory::Other);
  EXPECT_TRUE(op_info("aten::dropout").random);
  EXPECT_FALSE(op_info("aten::relu").random);
  EXPECT_FALSE(op_info("aten::no_such_op").known);
  EXPECT_FALSE(op_info("prim::Constant").known);
  // __and__-style names keep their underscores.
  EXPECT_FALSE(op_info("aten::__and__").known);
}

TEST(Ir, AliasFactsFromSchemas) {
  Node view{"aten::transpose", "int", {{"self", ValueRef{0}}, {"dim0", std::int64_t{0}}, {"dim1", std::int64_t{1}}}, {1}, false};
  EXPECT_TRUE(alias_facts(view).is_view);
  Node inplace{"aten::add_", "Tensor", {{"self", ValueRef{0}}, {"other", ValueRef{1}}, {"alpha", std::int64_t{1}}}, {2}, false};
  auto facts = alias_facts(inplace);
  EXPECT_FALSE(facts.is_view);
  EXPECT_EQ(facts.mutated_inputs, std::vector<int>{0});
  EXPECT_EQ(facts.output_writes, std::vector<int>{0});
  Node pure{"aten::relu", "", {{"self", ValueRef{0}}}, {1}, false};
  EXPECT_FALSE(alias_facts(pure).is_view);
  EXPECT_TRUE(alias_facts(pure).mutated_inputs.empty());
  Node unknown{"aten::definitely_not_an_op", "", {}, {}, false};
  EXPECT_THROW(alias_facts(unknown), Error);
}

TEST(Ir, DtypeNamesRoundTrip) {
  for (auto dtype : {at::kFloat, at::kHalf, at::kBFloat16, at::kLong, at::kBool, at::kDouble, at::kByte, at::kUInt64}) {
    EXPECT_EQ(dtype_from_name(dtype_name(dtype)), dtype);
    // and through DLPack, as values cross between backends
    EXPECT_EQ(from_dlpack_dtype(to_dlpack_dtype(dtype)), dtype) << dtype_name(dtype);
  }
  EXPECT_THROW(dtype_from_name("float128"), Error);
}

}  // namespace
}  // namespace zenith::ir
