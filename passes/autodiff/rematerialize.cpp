#include <map>
#include <set>

#include "core/op_registry.h"
#include "core/op_schema.h"
#include "passes/autodiff/backward_graph.h"

namespace zenith::autodiff {
namespace {

bool cheap_to_recompute(const ir::Node& node) {
  auto info = ir::op_info(node.op);
  return info.category == ir::OpCategory::Elementwise && !info.random && node.outputs.size() == 1 &&
         ir::alias_facts(node).mutated_inputs.empty();
}

// Values the backward can have without the forward keeping anything more alive.
bool free_in_backward(const ir::Graph& forward, int id) {
  return forward.value(id).role != ir::ValueRole::Intermediate;
}

}  // namespace

void rematerialize(const ir::Graph& forward, BackwardGraph& backward) {
  std::set<int> saved(backward.saved.begin(), backward.saved.end());
  // Last node first: a recomputed value may read another that is recomputed in turn.
  std::vector<int> recompute;
  for (int n = static_cast<int>(forward.nodes.size()) - 1; n >= 0; --n) {
    const auto& node = forward.nodes[n];
    if (!cheap_to_recompute(node) || !saved.count(node.outputs[0]) || free_in_backward(forward, node.outputs[0])) continue;
    bool available = true;
    for (int in : node.input_ids()) available = available && (saved.count(in) || free_in_backward(forward, in));
    if (available) recompute.push_back(n);
  }
  if (recompute.empty()) return;

  auto& graph = backward.graph;
  const std::size_t saved_count = backward.saved.size();
  std::map<int, int> in_backward;  // forward id -> backward id
  for (std::size_t k = 0; k < saved_count; ++k) in_backward[backward.saved[k]] = graph.inputs[k];
  std::vector<int> added_inputs;
  std::vector<int> added_saved;
  auto bring = [&](int id) -> int {
    auto it = in_backward.find(id);
    if (it != in_backward.end()) return it->second;
    const auto& value = forward.value(id);
    int fresh;
    if (value.role == ir::ValueRole::Constant) {
      fresh = graph.add_value(value.type, ir::ValueRole::Constant, value.name);
      graph.constants[fresh] = forward.constants.at(id);
    } else {
      fresh = graph.add_value(value.type, ir::ValueRole::Input, "saved." + std::to_string(id));
      added_inputs.push_back(fresh);
      added_saved.push_back(id);
    }
    return in_backward[id] = fresh;
  };

  std::vector<ir::Node> prologue;
  std::map<int, int> replaced;  // old backward input id -> recomputed backward id
  for (auto it = recompute.rbegin(); it != recompute.rend(); ++it) {
    ir::Node copy = forward.nodes[*it];
    copy.fusion_group = -1;
    copy.rename_inputs(bring);
    const int forward_out = copy.outputs[0];
    const int out = graph.add_value(forward.value(forward_out).type, ir::ValueRole::Intermediate);
    copy.outputs = {out};
    replaced[in_backward.at(forward_out)] = out;
    in_backward[forward_out] = out;
    prologue.push_back(std::move(copy));
  }
  for (const auto& [old_id, new_id] : replaced) graph.replace_uses(old_id, new_id);
  prologue.insert(prologue.end(), graph.nodes.begin(), graph.nodes.end());
  graph.nodes = std::move(prologue);

  std::vector<int> inputs;
  std::vector<int> kept_saved;
  for (std::size_t k = 0; k < saved_count; ++k) {
    if (replaced.count(graph.inputs[k])) continue;
    inputs.push_back(graph.inputs[k]);
    kept_saved.push_back(backward.saved[k]);
  }
  inputs.insert(inputs.end(), added_inputs.begin(), added_inputs.end());
  kept_saved.insert(kept_saved.end(), added_saved.begin(), added_saved.end());
  inputs.insert(inputs.end(), graph.inputs.begin() + static_cast<std::ptrdiff_t>(saved_count), graph.inputs.end());
  graph.inputs = std::move(inputs);
  backward.saved = std::move(kept_saved);
  graph.remove_unused_values();
  backward.recomputed = static_cast<int>(replaced.size());
}

}  // namespace zenith::autodiff
