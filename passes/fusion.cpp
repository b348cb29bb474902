#include "passes/fusion.h"

#include <map>
#include <set>

#include "core/op_registry.h"
#include "core/op_schema.h"

namespace zenith::passes {
namespace {

// Pure elementwise nodes whose results are tensors on one device.
bool fusible(const ir::Graph& graph, const ir::Node& node) {
  auto info = ir::op_info(node.op);
  if (info.category != ir::OpCategory::Elementwise || info.random || node.list_output) return false;
  auto facts = ir::alias_facts(node);
  if (facts.is_view || !facts.mutated_inputs.empty()) return false;
  for (int id : node.input_ids()) {
    if (graph.value(id).type.device != graph.value(node.outputs.at(0)).type.device) return false;
  }
  return true;
}

}  // namespace

void ElementwiseFusion::run(ir::Graph& graph, PassReport& report) {
  auto producer = graph.producers();
  const std::size_t n_nodes = graph.nodes.size();
  std::vector<int> group_of(n_nodes, -1);
  // depends_on[n]: groups that node n reads from, directly or through other nodes. A node may join
  // group G only if none of its producers outside G depends on G: otherwise G would feed a node
  // outside it that feeds G again, and no order could run G as one kernel.
  std::vector<std::set<int>> depends_on(n_nodes);
  std::map<int, std::size_t> group_size;
  int next_group = 0;

  for (std::size_t n = 0; n < n_nodes; ++n) {
    auto& node = graph.nodes[n];
    node.fusion_group = -1;
    std::vector<int> producers;
    for (int id : node.input_ids()) {
      if (producer[id] >= 0) producers.push_back(producer[id]);
    }
    for (int p : producers) {
      depends_on[n].insert(depends_on[p].begin(), depends_on[p].end());
      if (group_of[p] >= 0) depends_on[n].insert(group_of[p]);
    }
    if (!fusible(graph, node)) continue;
    int chosen = -1;
    for (int p : producers) {
      int candidate = group_of[p];
      if (candidate < 0 || group_size[candidate] >= max_nodes_) continue;
      bool convex = true;
      for (int m : producers) convex = convex && (group_of[m] == candidate || !depends_on[m].count(candidate));
      if (convex) {
        chosen = candidate;
        break;
      }
    }
    if (chosen < 0) chosen = next_group++;
    group_of[n] = chosen;
    group_size[chosen] += 1;
  }

  // Only groups of two or more nodes are fusion; renumber them densely.
  std::map<int, int> dense;
  std::int64_t fused_nodes = 0;
  for (std::size_t n = 0; n < n_nodes; ++n) {
    int g = group_of[n];
    if (g < 0 || group_size[g] < 2) continue;
    auto [it, inserted] = dense.emplace(g, static_cast<int>(dense.size()));
    graph.nodes[n].fusion_group = it->second;
    ++fused_nodes;
  }
  report.counters["groups"] = static_cast<std::int64_t>(dense.size());
  report.counters["fused_nodes"] = fused_nodes;
}

}  // namespace zenith::passes
