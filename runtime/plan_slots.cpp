#include "runtime/plan_slots.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

namespace zenith::capture {
namespace {

std::int64_t* slot_address(ir::Graph& graph, const IntSlot& slot) {
  switch (slot.kind) {
    case IntSlot::Kind::Size: return &graph.value(slot.owner).type.sizes[slot.position];
    case IntSlot::Kind::Stride: return &graph.value(slot.owner).type.strides[slot.position];
    case IntSlot::Kind::Argument: break;
  }
  auto& value = graph.nodes[slot.owner].args[slot.position].value;
  if (auto* list = std::get_if<std::vector<std::int64_t>>(&value)) return &(*list)[slot.element];
  return &std::get<std::int64_t>(value);
}

std::string node_name(const ir::Graph& graph, int index) {
  return fmt::format("node {} ({})", index, graph.nodes[index].qualified_name());
}

std::string value_difference(const ir::Value& a, const ir::Value& b) {
  if (a.type.dtype != b.type.dtype || a.type.device != b.type.device || a.type.rank() != b.type.rank() ||
      a.type.requires_grad != b.type.requires_grad) {
    return fmt::format("%{} is {} at one size and {} at another", a.id, a.type.to_string(), b.type.to_string());
  }
  if (a.role != b.role || a.name != b.name) return fmt::format("%{} has another role or name", a.id);
  return "";
}

std::string argument_difference(const ir::Graph& graph, int index, const ir::Argument& a, const ir::Argument& b) {
  if (a.name != b.name || a.value.index() != b.value.index()) {
    return fmt::format("{}: argument '{}' has another kind", node_name(graph, index), a.name);
  }
  if (std::holds_alternative<std::int64_t>(a.value)) return "";
  if (const auto* list = std::get_if<std::vector<std::int64_t>>(&a.value)) {
    const auto& other = std::get<std::vector<std::int64_t>>(b.value);
    if (list->size() == other.size()) return "";
    return fmt::format("{}: argument '{}' has {} elements at one size and {} at another", node_name(graph, index),
                       a.name, list->size(), other.size());
  }
  if (a.value == b.value) return "";
  return fmt::format("{}: argument '{}' is {} at one size and {} at another", node_name(graph, index), a.name,
                     a.to_string(), b.to_string());
}

std::string node_difference(const ir::Graph& graph, int index, const ir::Node& a, const ir::Node& b) {
  if (a.op != b.op || a.overload != b.overload || a.outputs != b.outputs || a.list_output != b.list_output ||
      a.fusion_group != b.fusion_group || a.args.size() != b.args.size()) {
    return fmt::format("{} differs: {} at another size", node_name(graph, index), b.qualified_name());
  }
  for (std::size_t k = 0; k < a.args.size(); ++k) {
    if (auto why = argument_difference(graph, index, a.args[k], b.args[k]); !why.empty()) return why;
  }
  return "";
}

std::string constants_difference(const ir::Graph& a, const ir::Graph& b) {
  if (a.constants.size() != b.constants.size()) return "the captures hold different numbers of constants";
  for (const auto& [id, tensor] : a.constants) {
    auto other = b.constants.find(id);
    if (other == b.constants.end()) return fmt::format("constant %{} exists at one size only", id);
    const auto& t = other->second;
    if (tensor.sizes() != t.sizes() || tensor.scalar_type() != t.scalar_type() || !at::equal(tensor, t)) {
      return fmt::format("constant %{} ({}) differs between sizes: something the forward computes from sizes alone "
                         "was folded",
                         id, a.value(id).type.to_string());
    }
  }
  return "";
}

}  // namespace

std::string IntSlot::describe(const ir::Graph& graph) const {
  switch (kind) {
    case Kind::Size: return fmt::format("size {} of %{} ({})", position, owner, graph.value(owner).type.to_string());
    case Kind::Stride: return fmt::format("stride {} of %{} ({})", position, owner, graph.value(owner).type.to_string());
    case Kind::Argument: break;
  }
  return fmt::format("argument '{}' of {}", graph.nodes[owner].args[position].name, node_name(graph, owner));
}

std::vector<IntSlot> int_slots(const ir::Graph& graph) {
  std::vector<IntSlot> slots;
  for (const auto& value : graph.values) {
    if (!value) continue;
    for (int d = 0; d < static_cast<int>(value->type.sizes.size()); ++d) slots.push_back({IntSlot::Kind::Size, value->id, d, 0});
    for (int d = 0; d < static_cast<int>(value->type.strides.size()); ++d) slots.push_back({IntSlot::Kind::Stride, value->id, d, 0});
  }
  for (int n = 0; n < static_cast<int>(graph.nodes.size()); ++n) {
    const auto& args = graph.nodes[n].args;
    for (int a = 0; a < static_cast<int>(args.size()); ++a) {
      if (std::holds_alternative<std::int64_t>(args[a].value)) slots.push_back({IntSlot::Kind::Argument, n, a, 0});
      if (const auto* list = std::get_if<std::vector<std::int64_t>>(&args[a].value)) {
        for (int e = 0; e < static_cast<int>(list->size()); ++e) slots.push_back({IntSlot::Kind::Argument, n, a, e});
      }
    }
  }
  return slots;
}

std::vector<std::int64_t> read_slots(const ir::Graph& graph, const std::vector<IntSlot>& slots) {
  // slot_address needs a mutable graph; reading through it changes nothing.
  auto& mutable_graph = const_cast<ir::Graph&>(graph);
  std::vector<std::int64_t> values;
  values.reserve(slots.size());
  for (const auto& slot : slots) values.push_back(*slot_address(mutable_graph, slot));
  return values;
}

void write_slot(ir::Graph& graph, const IntSlot& slot, std::int64_t value) { *slot_address(graph, slot) = value; }

std::string structure_difference(const ir::Graph& a, const ir::Graph& b) {
  if (a.values.size() != b.values.size() || a.nodes.size() != b.nodes.size()) {
    return fmt::format("the captures differ in size: {} nodes over {} value ids at one size, {} over {} at another",
                       a.nodes.size(), a.values.size(), b.nodes.size(), b.values.size());
  }
  for (std::size_t id = 0; id < a.values.size(); ++id) {
    if (a.values[id].has_value() != b.values[id].has_value()) return fmt::format("value %{} exists at one size only", id);
    if (!a.values[id]) continue;
    if (auto why = value_difference(*a.values[id], *b.values[id]); !why.empty()) return why;
  }
  for (std::size_t n = 0; n < a.nodes.size(); ++n) {
    if (auto why = node_difference(a, static_cast<int>(n), a.nodes[n], b.nodes[n]); !why.empty()) return why;
  }
  if (a.inputs != b.inputs || a.outputs != b.outputs || !(a.output_structure == b.output_structure) ||
      a.output_aliases != b.output_aliases) {
    return "the graphs' inputs or outputs differ";
  }
  return constants_difference(a, b);
}

std::string plan_difference(const Plan& a, const Plan& b) {
  if (auto why = structure_difference(a.graph, b.graph); !why.empty()) return why;
  if (a.steps.size() != b.steps.size()) {
    return fmt::format("the plans have {} steps at one size and {} at another", a.steps.size(), b.steps.size());
  }
  for (std::size_t s = 0; s < a.steps.size(); ++s) {
    const auto& x = a.steps[s];
    const auto& y = b.steps[s];
    if (x.kind != y.kind || x.backend != y.backend || x.nodes != y.nodes || x.inputs != y.inputs ||
        x.outputs != y.outputs || x.output_aliases != y.output_aliases || x.device != y.device) {
      return fmt::format("step {} differs between sizes (backend {} and {}): fusion or partitioning depends on sizes",
                         s, x.backend, y.backend);
    }
  }
  return "";
}

}  // namespace zenith::capture
