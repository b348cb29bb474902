#include "passes/dead_code_elimination.h"

#include "passes/effects.h"

namespace zenith::passes {

void DeadCodeElimination::run(ir::Graph& graph, PassReport& report) {
  auto effects = analyse_effects(graph);
  std::vector<bool> live(graph.values.size(), false);
  for (int id : graph.outputs) live[id] = true;
  std::vector<bool> keep(graph.nodes.size(), false);
  // Walking backwards marks a node live before its producers are looked at.
  for (std::size_t i = graph.nodes.size(); i-- > 0;) {
    const auto& node = graph.nodes[i];
    bool needed = effects.node_has_effect[i];
    for (int id : node.outputs) needed = needed || live[id];
    if (!needed) continue;
    keep[i] = true;
    for (int id : node.input_ids()) live[id] = true;
  }
  std::vector<ir::Node> kept;
  for (std::size_t i = 0; i < graph.nodes.size(); ++i) {
    if (keep[i]) kept.push_back(std::move(graph.nodes[i]));
  }
  report.counters["removed"] = static_cast<std::int64_t>(graph.nodes.size() - kept.size());
  graph.nodes = std::move(kept);
  graph.remove_unused_values();
}

}  // namespace zenith::passes
