#include "passes/fusion.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include <c10/core/ScalarType.h>

#include "core/attention_blind_rows.h"
#include "core/node_arguments.h"
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
  const std::size_t outer = space->shape.size() - static_cast<std::size_t>(space->inner);
  for (int id : node.input_ids()) {
    const auto& type = graph.value(id).type;
    if (producer[id] >= 0 && group_of[producer[id]] == candidate) {
      // A per-row result without keepdim, read per element, would broadcast against the wrong
      // dimensions; the row kernel refuses it, so it stays out.
      bool flat_row = outer > 0 && type.sizes.size() == outer &&
                      std::equal(type.sizes.begin(), type.sizes.end(), space->shape.begin());
      if (full && flat_row) return false;
      continue;
    }
    if (type.numel() == 1) continue;
    if (!full || !broadcasts_to(type.sizes, space->shape)) return false;
  }
  return true;
}

// The blind-rows node after attention node `n` when the two form one group: the attention reads
// at most kAttentionWithBlindRowsMaxRows query rows per (batch, head), a decode step's few, with
// heads the decode attention kernel takes (core/attention_blind_rows.h says why others stay apart).
std::optional<std::size_t> blind_rows_joining(const ir::Graph& graph, std::size_t n,
                                              const std::vector<std::vector<int>>& consumers) {
  const auto& node = graph.nodes[n];
  if (node.op != "aten::scaled_dot_product_attention") return std::nullopt;
  const int query = ir::tensor_arg(node, "query");
  if (query < 0) return std::nullopt;
  const auto& q = graph.value(query).type;
  if (q.rank() != 4 || q.sizes[2] > ir::kAttentionWithBlindRowsMaxRows) return std::nullopt;
  // A head of a power of two of 16-byte slices, at most kAttentionWithBlindRowsMaxHeadDim wide.
  const std::int64_t head = q.sizes[3], bytes = head * static_cast<std::int64_t>(c10::elementSize(q.dtype));
  const std::int64_t slices = bytes / 16;
  if (head > ir::kAttentionWithBlindRowsMaxHeadDim || bytes % 16 != 0 || slices < 1 || (slices & (slices - 1)) != 0) {
    return std::nullopt;
  }
  return ir::blind_rows_after(graph, n, consumers);
}

}  // namespace

namespace {

// The groups as they grow, node by node in graph order.
class Grouping {
 public:
  explicit Grouping(const ir::Graph& graph) : graph_(graph), group_of_(graph.nodes.size(), -1) {
    auto producer = graph.producers();
    producer_of_value_ = producer;
    producers_.resize(graph.nodes.size());
    for (std::size_t n = 0; n < graph.nodes.size(); ++n) {
      for (int id : graph.nodes[n].input_ids())
        if (producer[id] >= 0) producers_[n].push_back(producer[id]);
    }
  }

  const std::vector<int>& producers(std::size_t n) const { return producers_[n]; }
  int group_of(int n) const { return group_of_[n]; }
  std::size_t size(int group) const { return members_.count(group) ? members_.at(group).size() : 0; }
  const std::vector<int>& group_of_nodes() const { return group_of_; }
  const std::vector<int>& producer_of_value() const { return producer_of_value_; }

  int start_group(int n) {
    int g = next_group_++;
    add(n, g);
    return g;
  }
  void add(int n, int group) {
    group_of_[n] = group;
    members_[group].push_back(n);
  }

  // Whether `group` may take node `n`: no producer of n outside the group may reach the group,
  // directly or through other groups. A group runs as one unit, so reaching any member of a group
  // reaches everything that group reads; otherwise the group would feed a node outside it that
  // feeds the group again, and no order could run it as one kernel.
  bool keeps_convex(std::size_t n, int group) const {
    std::vector<char> seen(graph_.nodes.size(), 0);
    std::set<int> expanded;
    std::vector<int> stack;
    for (int p : producers_[n])
      if (group_of_[p] != group) stack.push_back(p);
    while (!stack.empty()) {
      int x = stack.back();
      stack.pop_back();
      if (seen[x]) continue;
      seen[x] = 1;
      if (group_of_[x] == group) return false;
      for (int p : producers_[x]) stack.push_back(p);
      if (group_of_[x] >= 0 && expanded.insert(group_of_[x]).second) {
        for (int member : members_.at(group_of_[x])) stack.push_back(member);
      }
    }
    return true;
  }

  const std::vector<int>& members(int group) const { return members_.at(group); }
  std::vector<int> groups() const {
    std::vector<int> ids;
    for (const auto& [group, nodes] : members_) ids.push_back(group);
    return ids;
  }
  // Moves every member of `from` into `into`.
  void merge(int from, int into) {
    for (int member : members_.at(from)) {
      group_of_[member] = into;
      members_[into].push_back(member);
    }
    members_.erase(from);
  }

  // Whether every member of `group` still fits once its rows are `space`.
  bool members_fit(int group, const RowSpace& space) const {
    for (int member : members_.at(group)) {
      if (!fits_row_space(graph_, graph_.nodes[member], &space, group, group_of_, producer_of_value_)) return false;
    }
    return true;
  }

 private:
  const ir::Graph& graph_;
  std::vector<int> group_of_;
  std::vector<int> producer_of_value_;
  std::vector<std::vector<int>> producers_;
  std::map<int, std::vector<int>> members_;
  int next_group_ = 0;
};

}  // namespace

namespace {

// A group whose results only one other elementwise group reads joins that group, which then
// computes them per element: a per-channel scale rsqrt(var + eps) * weight, or one side of a sum
// of two chains (x * cos + rotated * sin), costs a few instructions there, and a launch and a
// stored tensor on its own. (Groups grow from producer to consumer, and a node joins the group of
// one producer only: a chain that reads nothing the consumer's own chain produced starts a group
// of its own.) Row-reduction, matrix-product and attention groups (`closed`) neither join nor take
// others.
void absorb_single_reader_groups(const ir::Graph& graph, Grouping& grouping, const std::map<int, RowSpace>& row_space,
                                 const std::set<int>& closed, const std::vector<std::vector<int>>& consumers,
                                 std::size_t max_nodes) {
  const std::set<int> returned(graph.outputs.begin(), graph.outputs.end());
  for (int from : grouping.groups()) {
    if (row_space.count(from) || closed.count(from)) continue;
    const auto& members = grouping.members(from);
    std::set<int> readers;
    bool read_elsewhere = false;
    for (int member : members) {
      const auto& node = graph.nodes[static_cast<std::size_t>(member)];
      for (int id : node.outputs) {
        read_elsewhere = read_elsewhere || returned.count(id) > 0;
        for (int reader : consumers[static_cast<std::size_t>(id)]) {
          const int group = grouping.group_of(reader);
          if (group == from) continue;
          if (group < 0) read_elsewhere = true;
          else readers.insert(group);
        }
      }
    }
    if (read_elsewhere || readers.size() != 1) continue;
    const int into = *readers.begin();
    if (row_space.count(into) || closed.count(into)) continue;
    if (grouping.size(into) + members.size() > max_nodes) continue;
    bool convex = true;
    for (int member : members) convex = convex && grouping.keeps_convex(static_cast<std::size_t>(member), into);
    if (convex) grouping.merge(from, into);
  }
}

}  // namespace

void ElementwiseFusion::run(ir::Graph& graph, PassReport& report) {
  const std::size_t n_nodes = graph.nodes.size();
  Grouping grouping(graph);
  std::map<int, RowSpace> row_space;
  std::map<int, MatmulGroup> matmul_groups;
  // Groups nothing else joins: matrix products with their epilogues, attention with its blind rows.
  std::set<int> closed;
  // A decode step's attention and the blind rows after it: the blind-rows node's index, its group.
  std::map<std::size_t, int> blind_rows_group;
  const auto consumers = graph.consumers();

  for (std::size_t n = 0; n < n_nodes; ++n) {
    auto& node = graph.nodes[n];
    node.fusion_group = -1;
    if (starts_matmul_group(node)) {
      const int group = grouping.start_group(static_cast<int>(n));
      matmul_groups[group] = matmul_group_of(graph, node);
      closed.insert(group);
      continue;
    }
    if (auto blind = blind_rows_joining(graph, n, consumers)) {
      const int group = grouping.start_group(static_cast<int>(n));
      blind_rows_group[*blind] = group;
      closed.insert(group);
      continue;
    }
    if (auto joining = blind_rows_group.find(n); joining != blind_rows_group.end()) {
      // It reads the attention's result and the attention's own operands, so the group stays convex.
      grouping.add(static_cast<int>(n), joining->second);
      continue;
    }
    if (!fusible(graph, node)) continue;
    auto reduction = ir::row_reduction(graph, node);
    int chosen = -1;
    for (int p : grouping.producers(n)) {
      int candidate = grouping.group_of(p);
      if (candidate < 0 || grouping.size(candidate) >= max_nodes_) continue;
      if (auto matmul = matmul_groups.find(candidate); matmul != matmul_groups.end()) {
        // A matrix product's group takes its epilogue steps only; the tail has no other reader,
        // so the group stays convex.
        if (extend_matmul_group(graph, node, matmul->second, consumers)) {
          chosen = candidate;
          break;
        }
        continue;
      }
      if (closed.count(candidate)) continue;
      auto space = row_space.find(candidate);
      const RowSpace* rows = space == row_space.end() ? nullptr : &space->second;
      if (!fits_row_space(graph, node, rows, candidate, grouping.group_of_nodes(), grouping.producer_of_value())) continue;
      // A first reduction gives the group its rows: what joined before must fit them too.
      if (reduction && rows == nullptr &&
          !grouping.members_fit(candidate, RowSpace{graph.value(reduction->input).type.sizes, reduction->inner})) {
        continue;
      }
      if (grouping.keeps_convex(n, candidate)) {
        chosen = candidate;
        break;
      }
    }
    if (chosen < 0) chosen = grouping.start_group(static_cast<int>(n));
    else grouping.add(static_cast<int>(n), chosen);
    if (reduction && !row_space.count(chosen)) {
      row_space[chosen] = RowSpace{graph.value(reduction->input).type.sizes, reduction->inner};
    }
  }

  absorb_single_reader_groups(graph, grouping, row_space, closed, consumers, max_nodes_);

  // Only groups of two or more nodes are fusion; renumber them densely.
  std::map<int, int> dense;
  std::int64_t fused_nodes = 0;
  for (std::size_t n = 0; n < n_nodes; ++n) {
    int g = grouping.group_of(static_cast<int>(n));
    if (g < 0 || grouping.size(g) < 2) continue;
    auto [it, inserted] = dense.emplace(g, static_cast<int>(dense.size()));
    graph.nodes[n].fusion_group = it->second;
    ++fused_nodes;
  }
  report.counters["groups"] = static_cast<std::int64_t>(dense.size());
  report.counters["fused_nodes"] = fused_nodes;
}

}  // namespace zenith::passes
