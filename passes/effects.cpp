#include "passes/effects.h"

#include <algorithm>
#include <numeric>

#include "core/node_arguments.h"
#include "core/op_registry.h"
#include "core/op_schema.h"

namespace zenith::passes {
namespace {

// Union-find over value ids: values that may share memory end up in one set.
struct AliasSets {
  std::vector<int> parent;
  explicit AliasSets(std::size_t n) : parent(n) { std::iota(parent.begin(), parent.end(), 0); }
  int find(int x) { return parent[x] == x ? x : parent[x] = find(parent[x]); }
  void join(int a, int b) { parent[find(a)] = find(b); }
};

// Dropout in eval mode (train=false) is the identity: it draws nothing; attention draws only with
// a dropout probability.
bool draws_random_numbers(const ir::Node& node) {
  if (!ir::op_info(node.op).random) return false;
  if (node.arg("dropout_p") != nullptr) return ir::number_arg(node, "dropout_p").value_or(1.0) > 0.0;
  const auto* train = node.arg("train");
  return train == nullptr || !std::holds_alternative<bool>(train->value) || std::get<bool>(train->value);
}

// Batch norm in training mode updates its running statistics in place, though the schemas of
// batch_norm, native_batch_norm and cudnn_batch_norm do not say so.
std::vector<int> running_statistics_written(const ir::Node& node) {
  if (node.op != "aten::batch_norm" && node.op != "aten::native_batch_norm" && node.op != "aten::cudnn_batch_norm") {
    return {};
  }
  const auto* training = node.arg("training");
  if (training == nullptr || !std::holds_alternative<bool>(training->value) || !std::get<bool>(training->value)) return {};
  std::vector<int> written;
  for (const char* name : {"running_mean", "running_var"}) {
    const auto* arg = node.arg(name);
    if (const auto* ref = arg ? std::get_if<ir::ValueRef>(&arg->value) : nullptr) written.push_back(ref->id);
  }
  return written;
}

}  // namespace

Effects analyse_effects(const ir::Graph& graph) {
  Effects effects;
  effects.node_has_effect.assign(graph.nodes.size(), false);
  effects.value_mutable.assign(graph.values.size(), false);
  AliasSets sets(graph.values.size());
  std::vector<int> written;
  std::vector<std::vector<int>> written_by(graph.nodes.size());
  std::vector<bool> random(graph.nodes.size(), false);
  for (std::size_t n = 0; n < graph.nodes.size(); ++n) {
    const auto& node = graph.nodes[n];
    auto facts = ir::alias_facts(node);
    if (facts.is_view) {
      for (int in : node.input_ids())
        for (int out : node.outputs) sets.join(in, out);
    }
    for (std::size_t r = 0; r < facts.output_writes.size(); ++r) {
      if (facts.output_writes[r] >= 0) sets.join(facts.output_writes[r], node.outputs[r]);
    }
    auto statistics = running_statistics_written(node);
    written.insert(written.end(), facts.mutated_inputs.begin(), facts.mutated_inputs.end());
    written.insert(written.end(), statistics.begin(), statistics.end());
    written_by[n] = facts.mutated_inputs;
    written_by[n].insert(written_by[n].end(), statistics.begin(), statistics.end());
    random[n] = draws_random_numbers(node);
    effects.node_has_effect[n] = !written_by[n].empty() || random[n];
  }
  // Only now are the alias sets whole: a view taken after a write may still join it to an input.
  std::vector<bool> input_root(graph.values.size(), false);
  for (int id : graph.inputs) input_root[sets.find(id)] = true;
  for (const auto& [id, tensor] : graph.constants) input_root[sets.find(id)] = true;  // the module keeps them
  effects.node_has_visible_effect.assign(graph.nodes.size(), false);
  for (std::size_t n = 0; n < graph.nodes.size(); ++n) {
    bool visible = random[n];
    for (int id : written_by[n]) visible = visible || input_root[sets.find(id)];
    effects.node_has_visible_effect[n] = visible;
  }
  std::vector<bool> root_written(graph.values.size(), false);
  for (int id : written) root_written[sets.find(id)] = true;
  for (std::size_t id = 0; id < graph.values.size(); ++id) {
    if (graph.values[id]) effects.value_mutable[id] = root_written[sets.find(static_cast<int>(id))];
  }
  return effects;
}

int first_visible_effect(const Effects& effects) {
  const auto& visible = effects.node_has_visible_effect;
  auto first = std::find(visible.begin(), visible.end(), true);
  return first == visible.end() ? -1 : static_cast<int>(first - visible.begin());
}

}  // namespace zenith::passes
