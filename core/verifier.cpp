#include "core/verifier.h"

#include <fmt/format.h>

#include "zenith/error.h"

namespace zenith::ir {
namespace {

void fail(const std::string& message) { throw Error("IR verifier: " + message); }

void check_structure(const OutputStructure& structure, std::size_t outputs, std::vector<bool>& seen) {
  if (structure.kind == OutputStructure::Kind::Tensor) {
    if (structure.index < 0 || static_cast<std::size_t>(structure.index) >= outputs) {
      fail(fmt::format("output structure names output {} but the graph has {}", structure.index, outputs));
    }
    seen[structure.index] = true;
    return;
  }
  if (structure.kind == OutputStructure::Kind::Dict) {
    if (structure.keys.size() != structure.elements.size()) {
      fail(fmt::format("output dict has {} keys for {} values", structure.keys.size(), structure.elements.size()));
    }
    for (std::size_t i = 0; i < structure.keys.size(); ++i) {
      for (std::size_t j = 0; j < i; ++j) {
        if (structure.keys[i] == structure.keys[j]) fail(fmt::format("output dict repeats the key '{}'", structure.keys[i]));
      }
    }
  }
  for (const auto& element : structure.elements) check_structure(element, outputs, seen);
}

void check_values(const Graph& graph, bool allow_missing_constant_data) {
  for (std::size_t i = 0; i < graph.values.size(); ++i) {
    const auto& value = graph.values[i];
    if (!value) continue;
    if (value->id != static_cast<int>(i)) fail(fmt::format("value at index {} has id {}", i, value->id));
    if (value->type.sizes.size() != value->type.strides.size()) {
      fail(fmt::format("value %{} has {} sizes but {} strides", i, value->type.sizes.size(), value->type.strides.size()));
    }
    for (std::size_t d = 0; d < value->type.sizes.size(); ++d) {
      if (value->type.sizes[d] < 0 || value->type.strides[d] < 0) {
        fail(fmt::format("value %{} has a negative size or stride in dimension {}", i, d));
      }
    }
    if (value->role == ValueRole::Constant && !allow_missing_constant_data && !graph.constants.count(value->id)) {
      fail(fmt::format("constant %{} has no data", i));
    }
  }
}

}  // namespace

void verify(const Graph& graph, bool allow_missing_constant_data) {
  check_values(graph, allow_missing_constant_data);
  std::vector<bool> defined(graph.values.size(), false);
  for (int id : graph.inputs) {
    if (!graph.has_value(id)) fail(fmt::format("input %{} is not a value of the graph", id));
    if (defined[id]) fail(fmt::format("input %{} is listed twice", id));
    defined[id] = true;
  }
  for (const auto& [id, tensor] : graph.constants) {
    if (!graph.has_value(id) || graph.value(id).role != ValueRole::Constant) {
      fail(fmt::format("constant data is attached to %{}, which is not a constant value", id));
    }
  }
  for (std::size_t i = 0; i < graph.values.size(); ++i) {
    if (graph.values[i] && graph.values[i]->role == ValueRole::Constant) defined[i] = true;
  }
  for (std::size_t n = 0; n < graph.nodes.size(); ++n) {
    const auto& node = graph.nodes[n];
    if (node.op.empty()) fail(fmt::format("node {} has no op name", n));
    for (int id : node.input_ids()) {
      if (!graph.has_value(id)) fail(fmt::format("node {} ({}) reads %{}, which does not exist", n, node.qualified_name(), id));
      if (!defined[id]) {
        fail(fmt::format("node {} ({}) reads %{} before it is defined", n, node.qualified_name(), id));
      }
    }
    for (int id : node.outputs) {
      if (!graph.has_value(id)) fail(fmt::format("node {} ({}) writes %{}, which does not exist", n, node.qualified_name(), id));
      if (defined[id]) fail(fmt::format("node {} ({}) defines %{} a second time", n, node.qualified_name(), id));
      if (graph.value(id).role != ValueRole::Intermediate) {
        fail(fmt::format("node {} ({}) writes %{}, whose role is {}", n, node.qualified_name(), id,
                         role_name(graph.value(id).role)));
      }
      defined[id] = true;
    }
  }
  for (int id : graph.outputs) {
    if (!graph.has_value(id) || !defined[id]) fail(fmt::format("output %{} is never defined", id));
  }
  std::vector<bool> seen(graph.outputs.size(), false);
  check_structure(graph.output_structure, graph.outputs.size(), seen);
  if (!graph.output_aliases.empty()) {
    if (graph.output_aliases.size() != graph.outputs.size()) {
      fail(fmt::format("{} output aliases for {} outputs", graph.output_aliases.size(), graph.outputs.size()));
    }
    for (int alias : graph.output_aliases) {
      if (alias < -1 || alias >= static_cast<int>(graph.inputs.size())) {
        fail(fmt::format("output alias {} names no input (the group has {})", alias, graph.inputs.size()));
      }
    }
  }
}

}  // namespace zenith::ir
