#include "passes/common_subexpression_elimination.h"

#include <numeric>
#include <unordered_map>

#include "passes/effects.h"

namespace zenith::passes {
namespace {

// Two nodes compute the same thing when op and arguments match exactly (value ids included).
std::string node_key(const ir::Node& node) {
  std::string key = node.qualified_name();
  for (const auto& argument : node.args) key += "|" + argument.to_string();
  return key;
}

}  // namespace

void CommonSubexpressionElimination::run(ir::Graph& graph, PassReport& report) {
  auto effects = analyse_effects(graph);
  // remap[id]: the value that replaces `id`; renaming as we go lets chains of duplicates collapse.
  std::vector<int> remap(graph.values.size());
  std::iota(remap.begin(), remap.end(), 0);
  auto rename = [&](int id) { return remap[id]; };
  std::unordered_map<std::string, std::size_t> seen;
  std::vector<ir::Node> kept;
  std::int64_t merged = 0;
  for (std::size_t i = 0; i < graph.nodes.size(); ++i) {
    auto& node = graph.nodes[i];
    bool pure = !effects.node_has_effect[i];
    for (int id : node.input_ids()) pure = pure && !effects.value_mutable[id];
    for (int id : node.outputs) pure = pure && !effects.value_mutable[id];
    node.rename_inputs(rename);
    if (pure) {
      auto [it, inserted] = seen.emplace(node_key(node), kept.size());
      if (!inserted) {
        auto& earlier = kept[it->second];
        // One of them too large to keep between calls: so is the value they share.
        earlier.per_call = earlier.per_call || node.per_call;
        for (std::size_t r = 0; r < node.outputs.size(); ++r) remap[node.outputs[r]] = earlier.outputs[r];
        ++merged;
        continue;
      }
    }
    kept.push_back(std::move(node));
  }
  for (auto& id : graph.outputs) id = remap[id];
  graph.nodes = std::move(kept);
  graph.remove_unused_values();
  report.counters["merged"] = merged;
}

}  // namespace zenith::passes
