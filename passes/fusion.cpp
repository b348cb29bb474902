#include "passes/fusion.h"

#include <map>
#include <set>

#include "core/op_registry.h"
#include "core/op_schema.h"
#include "core/row_reduction.h"
#include "passes/matmul_epilogue.h"

namespace zenith::passes {
namespace {

// Pure elementwise nodes and row reductions whose results are tensors on one device.
bool fusible(const ir::Graph& graph, const ir::Node& node) {
  auto info = ir::op_info(node.op);
  bool elementwise = info.category == ir::OpCategory::Elementwise;
  bool row_reduction = info.category == ir::OpCategory::Reduction && ir::row_reduction(graph, node).has_value();
  if (!(elementwise || row_reduction) || info.random || node.list_output) return false;
  auto facts = ir::alias_facts(node);
  if (facts.is_view || !facts.mutated_inputs.empty()) return false;
  for (int id : node.input_ids()) {
    if (graph.value(id).type.device != graph.value(node.outputs.at(0)).type.device) return false;
  }
  return true;
}

// The shape every reduction of a group reads, and how many trailing dimensions rows span.
struct RowSpace {
  std::vector<std::int64_t> shape;
  int inner = 0;
};

bool broadcasts_to(const std::vector<std::int64_t>& sizes, const std::vector<std::int64_t>& shape) {
  if (sizes.size() > shape.size()) return false;
  for (std::size_t d = 0; d < sizes.size(); ++d) {
    auto target = shape[shape.size() - sizes.size() + d];
    if (sizes[d] != target && sizes[d] != 1) return false;
  }
  return true;
}

// One value per row: the reduced shape with or without the reduced dimensions kept as 1.
bool is_per_row(const std::vector<std::int64_t>& sizes, const RowSpace& space) {
  const std::size_t outer = space.shape.size() - static_cast<std::size_t>(space.inner);
  std::vector<std::int64_t> kept(space.shape.begin(), space.shape.begin() + static_cast<std::ptrdiff_t>(outer));
  if (sizes == kept) return true;
  kept.resize(space.shape.size(), 1);
  return sizes == kept;
}

// Whether `node` may join group `candidate`, whose reductions span `space` (null: none yet), so
// that one row kernel can still run it: reductions over the same rows, and elementwise nodes
// giving a value per element or per row of them, reading from outside only what broadcasts so.
bool fits_row_space(const ir::Graph& graph, const ir::Node& node, const RowSpace* space, int candidate,
                    const std::vector<int>& group_of, const std::vector<int>& producer) {
  if (space == nullptr) return true;
  if (auto reduction = ir::row_reduction(graph, node)) {
    return graph.value(reduction->input).type.sizes == space->shape && reduction->inner == space->inner;
  }
  const auto& out = graph.value(node.outputs.at(0)).type.sizes;
  const bool full = out == space->shape;
  if (!full && !is_per_row(out, *space)) return false;
  for (int id : node.input_ids()) {
    if (producer[id] >= 0 && group_of[producer[id]] == candidate) continue;
    const auto& type = graph.value(id).type;
    if (type.numel() == 1) continue;
    if (!full || !broadcasts_to(type.sizes, space->shape)) return false;
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
  std::map<int, RowSpace> row_space;
  std::map<int, MatmulGroup> matmul_groups;
  const auto consumers = graph.consumers();
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
    if (starts_matmul_group(node)) {
      group_of[n] = next_group++;
      group_size[group_of[n]] = 1;
      matmul_groups[group_of[n]] = matmul_group_of(graph, node);
      continue;
    }
    if (!fusible(graph, node)) continue;
    int chosen = -1;
    for (int p : producers) {
      int candidate = group_of[p];
      if (candidate < 0 || group_size[candidate] >= max_nodes_) continue;
      if (auto matmul = matmul_groups.find(candidate); matmul != matmul_groups.end()) {
        // A matrix product's group takes its epilogue steps only; the tail has no other reader,
        // so the group stays convex.
        if (extend_matmul_group(graph, node, matmul->second, consumers)) {
          chosen = candidate;
          break;
        }
        continue;
      }
      auto space = row_space.find(candidate);
      if (!fits_row_space(graph, node, space == row_space.end() ? nullptr : &space->second, candidate, group_of, producer)) {
        continue;
      }
      bool convex = true;
      for (int m : producers) convex = convex && (group_of[m] == candidate || !depends_on[m].count(candidate));
      if (convex) {
        chosen = candidate;
        break;
      }
    }
    if (chosen < 0) chosen = next_group++;
    if (auto reduction = ir::row_reduction(graph, node); reduction && !row_space.count(chosen)) {
      row_space[chosen] = RowSpace{graph.value(reduction->input).type.sizes, reduction->inner};
    }
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
