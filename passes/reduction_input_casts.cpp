#include "passes/reduction_input_casts.h"

#include <algorithm>
#include <variant>

#include "core/exact_widening.h"
#include "core/node_arguments.h"
#include "passes/effects.h"

namespace zenith::passes {
namespace {

// A reduction whose dtype argument, when given, casts its input first.
bool takes_input_dtype(const ir::Node& node) {
  const bool sum = node.op == "aten::sum" && node.overload == "dim_IntList";
  const bool mean = node.op == "aten::mean" && node.overload == "dim";
  if (!(sum || mean) || node.outputs.size() != 1) return false;
  const auto* dtype = node.arg("dtype");
  return dtype != nullptr && std::holds_alternative<ir::NoneArg>(dtype->value);
}

}  // namespace

void ReductionInputCasts::run(ir::Graph& graph, PassReport& report) {
  const auto effects = analyse_effects(graph);
  const auto producers = graph.producers();
  const auto consumers = graph.consumers();
  std::int64_t folded = 0;
  for (auto& node : graph.nodes) {
    if (!takes_input_dtype(node)) continue;
    const int cast_result = ir::tensor_arg(node, "self");
    const int producer = cast_result < 0 ? -1 : producers[static_cast<std::size_t>(cast_result)];
    if (producer < 0) continue;
    const auto& cast = graph.nodes[static_cast<std::size_t>(producer)];
    if (!ir::is_plain_cast(cast)) continue;
    const int x = ir::tensor_arg(cast, "self");
    const auto& from = graph.value(x).type;
    const auto& to = graph.value(cast_result).type;
    if (from.device != to.device || !ir::holds_exactly(from.dtype, to.dtype)) continue;
    if (consumers[static_cast<std::size_t>(cast_result)].size() != 1) continue;
    if (std::find(graph.outputs.begin(), graph.outputs.end(), cast_result) != graph.outputs.end()) continue;
    if (effects.value_mutable[x] || effects.value_mutable[cast_result]) continue;
    for (auto& arg : node.args) {
      if (arg.name == "self") arg.value = ir::ValueRef{x};
      if (arg.name == "dtype") arg.value = static_cast<std::int64_t>(to.dtype);
    }
    ++folded;
  }
  report.counters["folded"] = folded;
}

}  // namespace zenith::passes
