#include "core/read_only_values.h"

#include <set>

#include "core/op_schema.h"

namespace zenith::ir {

std::vector<bool> read_only_values(const Graph& graph) {
  // The memory each value is: the parameters and constants it may alias (a parameter or constant
  // is its own), or none for memory the graph allocates or the caller passes.
  std::vector<std::set<int>> bases(graph.values.size());
  std::vector<bool> owns_memory_of_its_own(graph.values.size(), false);  // allocated by a node, or a call input
  for (std::size_t id = 0; id < graph.values.size(); ++id) {
    if (!graph.values[id]) continue;
    const auto role = graph.values[id]->role;
    if (role == ValueRole::Parameter || role == ValueRole::Constant) bases[id].insert(static_cast<int>(id));
    else if (role == ValueRole::Input) owns_memory_of_its_own[id] = true;
  }
  std::set<int> written;
  for (const auto& node : graph.nodes) {
    const auto facts = alias_facts(node);
    const auto inputs = node.input_ids();
    for (int id : facts.mutated_inputs) written.insert(bases[id].begin(), bases[id].end());
    for (std::size_t r = 0; r < node.outputs.size(); ++r) {
      const int out = node.outputs[r];
      if (r < facts.output_writes.size() && facts.output_writes[r] >= 0) {
        bases[out] = bases[facts.output_writes[r]];
        owns_memory_of_its_own[out] = owns_memory_of_its_own[facts.output_writes[r]];
      } else if (facts.is_view) {
        for (int in : inputs) {
          bases[out].insert(bases[in].begin(), bases[in].end());
          if (owns_memory_of_its_own[in] || bases[in].empty()) owns_memory_of_its_own[out] = true;
        }
      } else {
        owns_memory_of_its_own[out] = true;
      }
    }
  }
  std::vector<bool> read_only(graph.values.size(), false);
  for (std::size_t id = 0; id < graph.values.size(); ++id) {
    if (!graph.values[id] || bases[id].empty() || owns_memory_of_its_own[id]) continue;
    bool untouched = true;
    for (int base : bases[id]) untouched = untouched && !written.count(base);
    read_only[id] = untouched;
  }
  return read_only;
}

}  // namespace zenith::ir
