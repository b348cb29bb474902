#include "conformance/cases.h"

#include <functional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "conformance/group_builder.h"

namespace zenith::conformance {
namespace {

struct Shape {
  std::vector<std::int64_t> sizes;
  bool transposed = false;

  std::string text() const { return fmt::format("[{}]{}", fmt::join(sizes, ", "), transposed ? " transposed" : ""); }
};

const std::vector<Shape>& elementwise_shapes() {
  static const std::vector<Shape> shapes = {{{1}}, {{7}}, {{4, 33}}, {{4, 33}, true}};
  return shapes;
}

// The first input takes the shape's layout; later ones are contiguous, so a binary op mixes both.
int shaped_input(GroupBuilder& builder, const Shape& shape, bool first) {
  return first && shape.transposed ? builder.transposed_input(shape.sizes) : builder.input(shape.sizes);
}

Case single_op(const std::string& op, const std::string& overload, const Shape& shape, bool binary) {
  GroupBuilder builder;
  int self = shaped_input(builder, shape, true);
  std::vector<ir::Argument> args = {tensor_arg("self", self)};
  if (binary) args.push_back(tensor_arg("other", shaped_input(builder, shape, false)));
  // add and sub carry alpha in their schema; 1 is what `a + b` traces to.
  if (overload == "Tensor" && (op == "aten::add" || op == "aten::sub")) args.push_back(int_arg("alpha", 1));
  builder.output(builder.node(op, overload, std::move(args)));
  auto name = fmt::format("{}{} {}", op, overload.empty() ? "" : "." + overload, shape.text());
  return {name, builder.build()};
}

void add_elementwise(std::vector<Case>& cases) {
  const std::vector<std::string> unary = {"aten::relu", "aten::sigmoid", "aten::tanh", "aten::neg", "aten::exp"};
  const std::vector<std::string> binary = {"aten::add", "aten::sub", "aten::mul", "aten::div"};
  for (const auto& op : unary)
    for (const auto& shape : elementwise_shapes()) cases.push_back(single_op(op, "", shape, false));
  for (const auto& op : binary)
    for (const auto& shape : elementwise_shapes()) cases.push_back(single_op(op, "Tensor", shape, true));
}

Case one_node_case(const std::string& name, const std::function<void(GroupBuilder&)>& body) {
  GroupBuilder builder;
  body(builder);
  return {name, builder.build()};
}

void add_beyond_elementwise(std::vector<Case>& cases) {
  for (const auto& shape : {Shape{{4, 33}}, Shape{{4, 33}, true}}) {
    cases.push_back(one_node_case("aten::gelu " + shape.text(), [&](GroupBuilder& b) {
      int x = shaped_input(b, shape, true);
      b.output(b.node("aten::gelu", "", {tensor_arg("self", x), string_arg("approximate", "none")}));
    }));
  }
  cases.push_back(one_node_case("aten::softmax.int [4, 33] dim -1", [](GroupBuilder& b) {
    int x = b.input({4, 33});
    b.output(b.node("aten::softmax", "int", {tensor_arg("self", x), int_arg("dim", -1), none_arg("dtype")}));
  }));
  cases.push_back(one_node_case("aten::sum.dim_IntList [4, 33] dim [1]", [](GroupBuilder& b) {
    int x = b.input({4, 33});
    b.output(b.node("aten::sum", "dim_IntList",
                    {tensor_arg("self", x), ints_arg("dim", {1}), bool_arg("keepdim", false), none_arg("dtype")}));
  }));
  cases.push_back(one_node_case("aten::mm [4, 33] x [33, 5]", [](GroupBuilder& b) {
    int x = b.input({4, 33});
    int y = b.input({33, 5});
    b.output(b.node("aten::mm", "", {tensor_arg("self", x), tensor_arg("mat2", y)}));
  }));
  cases.push_back(one_node_case("aten::layer_norm [4, 33] over [33]", [](GroupBuilder& b) {
    int x = b.input({4, 33});
    b.output(b.node("aten::layer_norm", "",
                    {tensor_arg("input", x), ints_arg("normalized_shape", {33}), none_arg("weight"), none_arg("bias"),
                     double_arg("eps", 1e-5), bool_arg("cudnn_enable", true)}));
  }));
}

int binary_node(GroupBuilder& b, const std::string& op, int self, int other) {
  std::vector<ir::Argument> args = {tensor_arg("self", self), tensor_arg("other", other)};
  if (op != "aten::mul") args.push_back(int_arg("alpha", 1));
  return b.node(op, "Tensor", std::move(args));
}

// add -> mul -> relu: intermediates that never leave the group.
Case chain_case(const Shape& shape) {
  return one_node_case("chain add -> mul -> relu " + shape.text(), [&](GroupBuilder& b) {
    int x = shaped_input(b, shape, true);
    int y = shaped_input(b, shape, false);
    int z = shaped_input(b, shape, false);
    int sum = binary_node(b, "aten::add", x, y);
    int product = binary_node(b, "aten::mul", sum, z);
    b.output(b.node("aten::relu", "", {tensor_arg("self", product)}));
  });
}

// One value feeds two branches that both leave the group.
Case two_output_dag_case(const Shape& shape) {
  return one_node_case("DAG sub -> (tanh, mul) with two outputs " + shape.text(), [&](GroupBuilder& b) {
    int x = shaped_input(b, shape, true);
    int y = shaped_input(b, shape, false);
    int difference = binary_node(b, "aten::sub", x, y);
    b.output(b.node("aten::tanh", "", {tensor_arg("self", difference)}));
    b.output(binary_node(b, "aten::mul", difference, x));
  });
}

void add_chains(std::vector<Case>& cases) {
  for (const auto& shape : {Shape{{7}}, Shape{{4, 33}, true}}) {
    cases.push_back(chain_case(shape));
    cases.push_back(two_output_dag_case(shape));
  }
}

}  // namespace

std::vector<Case> conformance_cases() {
  std::vector<Case> cases;
  add_elementwise(cases);
  add_beyond_elementwise(cases);
  add_chains(cases);
  return cases;
}

}  // namespace zenith::conformance
