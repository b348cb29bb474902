#include "core/op_schema.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <fmt/format.h>

#include "zenith/error.h"

namespace zenith::ir {

const c10::FunctionSchema& schema_of(const Node& node) {
  auto handle = c10::Dispatcher::singleton().findSchema({node.op, node.overload});
  if (!handle) {
    throw Error(fmt::format("no ATen operator is registered as '{}': the graph names an op this LibTorch lacks",
                            node.qualified_name()));
  }
  return handle->schema();
}

AliasFacts alias_facts(const Node& node) {
  const auto& schema = schema_of(node);
  AliasFacts facts;
  facts.output_writes.assign(node.outputs.size(), -1);
  const auto& arguments = schema.arguments();
  for (std::size_t i = 0; i < arguments.size() && i < node.args.size(); ++i) {
    const auto* alias = arguments[i].alias_info();
    if (alias != nullptr && alias->isWrite()) {
      for (int id : node.args[i].value_ids()) facts.mutated_inputs.push_back(id);
    }
  }
  const auto& returns = schema.returns();
  for (std::size_t r = 0; r < returns.size(); ++r) {
    const auto* alias = returns[r].alias_info();
    if (alias == nullptr) continue;
    if (!alias->isWrite()) {
      facts.is_view = true;
      continue;
    }
    // Find the written argument sharing the return's alias set (Tensor(a!) self -> Tensor(a!)).
    for (std::size_t i = 0; i < arguments.size() && i < node.args.size(); ++i) {
      const auto* arg_alias = arguments[i].alias_info();
      if (arg_alias != nullptr && arg_alias->isWrite() && arg_alias->beforeSets() == alias->beforeSets()) {
        auto ids = node.args[i].value_ids();
        if (ids.size() == 1 && r < facts.output_writes.size()) facts.output_writes[r] = ids[0];
      }
    }
  }
  return facts;
}

}  // namespace zenith::ir
