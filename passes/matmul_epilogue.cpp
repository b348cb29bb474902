#include "passes/matmul_epilogue.h"

#include <algorithm>

#include "core/node_arguments.h"

namespace zenith::passes {
namespace {

bool is_one(const ir::Argument* a) {
  if (a == nullptr || std::holds_alternative<ir::NoneArg>(a->value)) return true;
  if (const auto* i = std::get_if<std::int64_t>(&a->value)) return *i == 1;
  if (const auto* d = std::get_if<double>(&a->value)) return *d == 1.0;
  return false;
}


bool reads_only_tail(const ir::Node& node, int tail, int allowed_other) {
  auto ids = node.input_ids();
  return std::count(ids.begin(), ids.end(), tail) == 1 &&
         std::all_of(ids.begin(), ids.end(), [&](int id) { return id == tail || id == allowed_other; });
}

}  // namespace

bool starts_matmul_group(const ir::Node& node) {
  static const std::vector<std::string> roots = {"aten::mm", "aten::addmm", "aten::bmm", "aten::matmul", "aten::linear"};
  return node.outputs.size() == 1 && !node.list_output &&
         std::find(roots.begin(), roots.end(), node.op) != roots.end();
}

MatmulGroup matmul_group_of(const ir::Graph&, const ir::Node& node) {
  MatmulGroup group;
  group.tail = node.outputs.at(0);
  group.has_bias = node.op == "aten::addmm" || (node.op == "aten::linear" && ir::tensor_arg(node, "bias") >= 0);
  return group;
}

bool extend_matmul_group(const ir::Graph& graph, const ir::Node& node, MatmulGroup& group,
                         const std::vector<std::vector<int>>& consumers) {
  if (group.closed || node.outputs.size() != 1) return false;
  // The tail stays inside the group: only this node reads it and the graph does not return it.
  if (consumers[group.tail].size() != 1 ||
      std::find(graph.outputs.begin(), graph.outputs.end(), group.tail) != graph.outputs.end()) {
    return false;
  }
  const auto name = node.qualified_name();
  const bool relu = name == "aten::relu" && reads_only_tail(node, group.tail, -1);
  const auto* approximate = node.arg("approximate");
  const auto* text = approximate ? std::get_if<std::string>(&approximate->value) : nullptr;
  const bool gelu = name == "aten::gelu" && text && *text == "tanh" && reads_only_tail(node, group.tail, -1);
  if (relu || gelu) {
    group.tail = node.outputs[0];
    group.closed = true;
    return true;
  }
  if (name != "aten::add.Tensor" || group.has_bias || !is_one(node.arg("alpha"))) return false;
  int self = ir::tensor_arg(node, "self"), other = ir::tensor_arg(node, "other");
  int bias = self == group.tail ? other : self;
  if (bias < 0 || bias == group.tail || !reads_only_tail(node, group.tail, bias)) return false;
  const auto& product = graph.value(group.tail).type;
  const auto& bias_type = graph.value(bias).type;
  if (bias_type.rank() != 1 || product.rank() < 1 || bias_type.sizes[0] != product.sizes.back() ||
      graph.value(node.outputs[0]).type.sizes != product.sizes) {
    return false;
  }
  // A bias of another dtype (autocast's float32 bias on a bfloat16 product) promotes the sum: an
  // epilogue would round once where eager rounds the product and then the sum. The add stays an
  // elementwise node, fused with the cast that follows it.
  if (bias_type.dtype != product.dtype || graph.value(node.outputs[0]).type.dtype != product.dtype) return false;
  group.tail = node.outputs[0];
  group.has_bias = true;
  return true;
}

}  // namespace zenith::passes
