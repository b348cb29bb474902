#include "passes/cross_entropy_steps.h"

#include <cstdint>
#include <utility>
#include <variant>

#include "core/node_arguments.h"

namespace zenith::passes {
bool splits_into_cross_entropy_steps(const ir::Graph& graph, const ir::Node& node) {
  if (node.op != "aten::cross_entropy_loss" || node.outputs.size() != 1) return false;
  const int self = ir::tensor_arg(node, "self"), target = ir::tensor_arg(node, "target");
  // Absent counts as no smoothing; an argument that holds no number is not ours to read.
  const auto smoothing = node.arg("label_smoothing") ? ir::number_arg(node, "label_smoothing") : 0.0;
  return self >= 0 && target >= 0 && smoothing == 0.0 &&
         !at::isFloatingType(graph.value(target).type.dtype);
}

std::vector<ir::Node> cross_entropy_steps(const ir::Graph& graph, const ir::Node& node,
                                          std::optional<c10::ScalarType> cast_to, const NewStepValue& new_value) {
  const int logits = ir::tensor_arg(node, "self");
  const auto& type = graph.value(logits).type;
  std::vector<ir::Node> steps;
  ir::Node log_softmax;
  log_softmax.op = "aten::log_softmax";
  log_softmax.overload = "int";
  log_softmax.args = {{"self", ir::ValueRef{logits}},
                      {"dim", std::int64_t{type.rank() == 1 ? 0 : 1}},
                      {"dtype", cast_to ? ir::ArgValue{static_cast<std::int64_t>(type.dtype)} : ir::NoneArg{}}};
  log_softmax.outputs = {new_value(log_softmax, logits)};
  int log_probabilities = log_softmax.outputs[0];
  steps.push_back(std::move(log_softmax));
  if (cast_to) {
    auto cast = ir::plain_cast(log_probabilities, *cast_to);
    cast.outputs = {new_value(cast, logits)};
    log_probabilities = cast.outputs[0];
    steps.push_back(std::move(cast));
  }
  ir::Node nll;
  nll.op = "aten::nll_loss_nd";
  nll.args = {{"self", ir::ValueRef{log_probabilities}}, *node.arg("target"), *node.arg("weight"),
              *node.arg("reduction"), *node.arg("ignore_index")};
  nll.outputs = node.outputs;
  steps.push_back(std::move(nll));
  return steps;
}

}  // namespace zenith::passes
