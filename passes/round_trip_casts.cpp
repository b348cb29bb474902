#include "passes/round_trip_casts.h"

#include <algorithm>
#include <cstdint>
#include <variant>

#include "core/exact_widening.h"
#include "core/node_arguments.h"
#include "passes/effects.h"

namespace zenith::passes {

void RoundTripCastElimination::run(ir::Graph& graph, PassReport& report) {
  const auto effects = analyse_effects(graph);
  const auto producers = graph.producers();
  std::int64_t removed = 0;
  for (const auto& node : graph.nodes) {
    if (!ir::is_plain_cast(node)) continue;
    const int wide = ir::tensor_arg(node, "self");
    const int producer = producers[static_cast<std::size_t>(wide)];
    if (producer < 0 || !ir::is_plain_cast(graph.nodes[static_cast<std::size_t>(producer)])) continue;
    const int x = ir::tensor_arg(graph.nodes[static_cast<std::size_t>(producer)], "self");
    const int back = node.outputs.front();
    const auto& original = graph.value(x).type;
    const auto& result = graph.value(back).type;
    if (result.dtype != original.dtype || !ir::holds_exactly(original.dtype, graph.value(wide).type.dtype)) continue;
    if (result.sizes != original.sizes || result.strides != original.strides || result.device != original.device) {
      continue;
    }
    if (effects.value_mutable[x] || effects.value_mutable[wide] || effects.value_mutable[back]) continue;
    if (std::find(graph.outputs.begin(), graph.outputs.end(), back) != graph.outputs.end()) continue;
    graph.replace_uses(back, x);
    ++removed;
  }
  report.counters["removed"] = removed;
}

}  // namespace zenith::passes
