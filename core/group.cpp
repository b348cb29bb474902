#include "core/group.h"

#include <algorithm>
#include <set>

#include "core/op_schema.h"

namespace zenith::ir {

Group extract_group(const Graph& parent, const std::vector<int>& nodes, const std::vector<std::vector<int>>& consumers) {
  Group group;
  group.nodes = nodes;
  Graph& g = group.graph;
  g.values.resize(parent.values.size());
  std::set<int> inside(nodes.begin(), nodes.end());
  std::vector<bool> produced(parent.values.size(), false);
  std::vector<int> writes_of(parent.values.size(), -1);  // output id -> value it writes in place
  auto add_value = [&](int id, ValueRole role) {
    if (!g.values[id]) {
      Value copy = parent.value(id);
      copy.role = role;
      g.values[id] = copy;
    }
  };
  for (int index : nodes) {
    const auto& node = parent.nodes[index];
    for (int id : node.input_ids()) {
      if (produced[id] || std::find(g.inputs.begin(), g.inputs.end(), id) != g.inputs.end()) continue;
      add_value(id, ValueRole::Input);
      g.inputs.push_back(id);
    }
    auto facts = alias_facts(node);
    for (std::size_t r = 0; r < node.outputs.size(); ++r) {
      int id = node.outputs[r];
      add_value(id, ValueRole::Intermediate);
      produced[id] = true;
      writes_of[id] = facts.output_writes[r];
    }
    g.nodes.push_back(node);
  }
  std::set<int> graph_outputs(parent.outputs.begin(), parent.outputs.end());
  for (int index : nodes) {
    for (int id : parent.nodes[index].outputs) {
      bool read_outside = graph_outputs.count(id) > 0;
      for (int reader : consumers[id]) read_outside = read_outside || !inside.count(reader);
      if (!read_outside) continue;
      g.outputs.push_back(id);
      int alias = -1;
      if (writes_of[id] >= 0) {
        auto it = std::find(g.inputs.begin(), g.inputs.end(), writes_of[id]);
        if (it != g.inputs.end()) alias = static_cast<int>(it - g.inputs.begin());
      }
      g.output_aliases.push_back(alias);
    }
  }
  g.output_structure.kind = OutputStructure::Kind::Tuple;
  for (std::size_t i = 0; i < g.outputs.size(); ++i) {
    g.output_structure.elements.emplace_back().index = static_cast<int>(i);  // Kind::Tensor
  }
  return group;
}

}  // namespace zenith::ir
