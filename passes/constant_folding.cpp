#include "passes/constant_folding.h"

#include "core/tensor_type.h"
#include "core/aten_call.h"
#include "core/log.h"
#include "passes/effects.h"

namespace zenith::passes {

void ConstantFolding::run(ir::Graph& graph, PassReport& report) {
  auto effects = analyse_effects(graph);
  std::vector<ir::Node> kept;
  std::int64_t folded = 0, skipped_large = 0;
  for (std::size_t i = 0; i < graph.nodes.size(); ++i) {
    auto& node = graph.nodes[i];
    // A size-dependent node's arguments change with the sizes a symbolic plan serves; a per-call
    // node's result is too large to keep.
    bool foldable = !effects.node_has_effect[i] && !node.size_dependent && !node.per_call;
    for (int id : node.input_ids()) {
      foldable = foldable && graph.value(id).role == ir::ValueRole::Constant && !effects.value_mutable[id];
    }
    for (int id : node.outputs) foldable = foldable && !effects.value_mutable[id];
    std::size_t bytes = 0;
    for (int id : node.outputs) bytes += static_cast<std::size_t>(graph.value(id).type.storage_bytes());
    if (foldable && bytes > max_bytes_) {
      ++skipped_large;
      foldable = false;
    }
    if (!foldable) {
      kept.push_back(std::move(node));
      continue;
    }
    auto results = ir::AtenCall(node).run([&](int id) -> const at::Tensor& { return graph.constants.at(id); });
    for (std::size_t r = 0; r < node.outputs.size(); ++r) {
      auto& value = graph.value(node.outputs[r]);
      value.role = ir::ValueRole::Constant;
      value.type = type_of(results[r]);
      graph.constants[value.id] = results[r];
    }
    ++folded;
  }
  graph.nodes = std::move(kept);
  graph.remove_unused_values();
  report.counters["folded"] = folded;
  if (skipped_large) report.counters["too_large"] = skipped_large;
}

}  // namespace zenith::passes
