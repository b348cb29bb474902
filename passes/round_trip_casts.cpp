#include "passes/round_trip_casts.h"

#include <algorithm>
#include <cstdint>
#include <variant>

#include "core/node_arguments.h"
#include "passes/effects.h"

namespace zenith::passes {
namespace {

// `wide` represents every value of `narrow` exactly (NaN stays NaN, infinities stay infinite).
bool holds_exactly(c10::ScalarType narrow, c10::ScalarType wide) {
  const bool half = narrow == c10::kHalf || narrow == c10::kBFloat16;
  return (half && (wide == c10::kFloat || wide == c10::kDouble)) || (narrow == c10::kFloat && wide == c10::kDouble);
}

// aten::to.dtype on one device, no copy forced, layout kept: a cast and nothing else.
bool is_plain_cast(const ir::Node& node) {
  if (node.op != "aten::to" || node.overload != "dtype" || node.outputs.size() != 1) return false;
  if (ir::tensor_arg(node, "self") < 0) return false;
  const auto* copy = node.arg("copy");
  const auto* format = node.arg("memory_format");
  const bool* forced = copy ? std::get_if<bool>(&copy->value) : nullptr;
  return forced != nullptr && !*forced && format != nullptr && std::holds_alternative<ir::NoneArg>(format->value);
}

}  // namespace

void RoundTripCastElimination::run(ir::Graph& graph, PassReport& report) {
  const auto effects = analyse_effects(graph);
  const auto producers = graph.producers();
  std::int64_t removed = 0;
  for (const auto& node : graph.nodes) {
    if (!is_plain_cast(node)) continue;
    const int wide = ir::tensor_arg(node, "self");
    const int producer = producers[static_cast<std::size_t>(wide)];
    if (producer < 0 || !is_plain_cast(graph.nodes[static_cast<std::size_t>(producer)])) continue;
    const int x = ir::tensor_arg(graph.nodes[static_cast<std::size_t>(producer)], "self");
    const int back = node.outputs.front();
    const auto& original = graph.value(x).type;
    const auto& result = graph.value(back).type;
    if (result.dtype != original.dtype || !holds_exactly(original.dtype, graph.value(wide).type.dtype)) continue;
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
