#include "conformance/group_builder.h"

#include <ATen/ATen.h>

#include "common/random_tensors.h"
#include "core/aten_call.h"

#include "runtime/signature.h"

namespace zenith::conformance {
namespace {

ir::TensorType float_type(std::vector<std::int64_t> sizes, std::vector<std::int64_t> strides) {
  ir::TensorType type;
  type.dtype = c10::ScalarType::Float;
  type.sizes = std::move(sizes);
  type.strides = std::move(strides);
  return type;
}

std::vector<std::int64_t> contiguous_strides(const std::vector<std::int64_t>& sizes) {
  std::vector<std::int64_t> strides(sizes.size(), 1);
  for (std::size_t d = sizes.size(); d > 1; --d) strides[d - 2] = strides[d - 1] * std::max<std::int64_t>(sizes[d - 1], 1);
  return strides;
}

}  // namespace

int GroupBuilder::add_input(ir::TensorType type) {
  int id = graph_.add_value(std::move(type), ir::ValueRole::Input, "in" + std::to_string(graph_.inputs.size()));
  graph_.inputs.push_back(id);
  return id;
}

int GroupBuilder::input(const std::vector<std::int64_t>& sizes) {
  return add_input(float_type(sizes, contiguous_strides(sizes)));
}

int GroupBuilder::transposed_input(const std::vector<std::int64_t>& sizes) {
  // [a, b] with strides [1, a]: a contiguous [b, a] seen through .t().
  return add_input(float_type(sizes, {1, sizes.at(0)}));
}

int GroupBuilder::node(const std::string& op, const std::string& overload, std::vector<ir::Argument> args) {
  int result = graph_.add_value(ir::TensorType{}, ir::ValueRole::Intermediate);
  graph_.nodes.push_back(ir::Node{op, overload, std::move(args), {result}, false});
  return result;
}

void GroupBuilder::output(int id) {
  graph_.outputs.push_back(id);
  graph_.output_aliases.push_back(-1);
}

ir::Graph GroupBuilder::build() const {
  ir::Graph group = graph_;
  std::vector<at::Tensor> values(group.values.size());
  for (int id : group.inputs) values[id] = tools::random_tensor(group.value(id).type);
  for (const auto& node : group.nodes) {
    auto results = ir::AtenCall(node).run([&](int id) -> const at::Tensor& { return values.at(id); });
    values[node.outputs[0]] = results.at(0);
    group.value(node.outputs[0]).type = type_of(results[0]);
  }
  if (group.outputs.size() == 1) group.output_structure = ir::OutputStructure{};
  else {
    group.output_structure.kind = ir::OutputStructure::Kind::Tuple;
    for (std::size_t i = 0; i < group.outputs.size(); ++i) {
      group.output_structure.elements.emplace_back().index = static_cast<int>(i);  // Kind::Tensor
    }
  }
  return group;
}

ir::Argument tensor_arg(const std::string& name, int id) { return {name, ir::ValueRef{id}}; }
ir::Argument int_arg(const std::string& name, std::int64_t value) { return {name, value}; }
ir::Argument ints_arg(const std::string& name, std::vector<std::int64_t> values) { return {name, std::move(values)}; }
ir::Argument double_arg(const std::string& name, double value) { return {name, value}; }
ir::Argument bool_arg(const std::string& name, bool value) { return {name, value}; }
ir::Argument string_arg(const std::string& name, const std::string& value) { return {name, value}; }
ir::Argument none_arg(const std::string& name) { return {name, ir::NoneArg{}}; }

}  // namespace zenith::conformance
