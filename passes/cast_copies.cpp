#include "passes/cast_copies.h"

#include "core/node_arguments.h"

namespace zenith::passes {

void CastCopies::run(ir::Graph& graph, PassReport& report) {
  std::int64_t rewritten = 0;
  for (auto& node : graph.nodes) {
    if (!ir::is_plain_cast(node)) continue;
    const int self = ir::tensor_arg(node, "self");
    const auto& from = graph.value(self).type;
    const auto& to = graph.value(node.outputs.front()).type;
    if (from.dtype == to.dtype || from.device != to.device) continue;
    ir::Node copy;
    copy.op = "aten::_to_copy";
    copy.args = {{"self", ir::ValueRef{self}},
                 {"dtype", static_cast<std::int64_t>(to.dtype)},
                 {"layout", ir::NoneArg{}},
                 {"device", ir::NoneArg{}},
                 {"pin_memory", ir::NoneArg{}},
                 ir::copy_arg(node, "non_blocking"),
                 {"memory_format", ir::NoneArg{}}};
    copy.outputs = node.outputs;
    copy.size_dependent = node.size_dependent;
    copy.per_call = node.per_call;
    node = std::move(copy);
    ++rewritten;
  }
  report.counters["rewritten"] = rewritten;
}

}  // namespace zenith::passes
