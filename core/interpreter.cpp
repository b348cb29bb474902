#include "core/interpreter.h"

#include <c10/core/impl/LocalDispatchKeySet.h>
#include <fmt/format.h>

#include "core/aten_call.h"
#include "zenith/error.h"

namespace zenith::ir {

std::vector<at::Tensor> interpret(const Graph& graph, const std::vector<at::Tensor>& inputs) {
  auto values = interpret_values(graph, inputs);
  std::vector<at::Tensor> outputs;
  for (int id : graph.outputs) outputs.push_back(values[id]);
  return outputs;
}

std::vector<at::Tensor> interpret_values(const Graph& graph, const std::vector<at::Tensor>& inputs) {
  // The graph holds the casts autocast made when it was traced; autocast must not cast again.
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  if (inputs.size() != graph.inputs.size()) {
    throw Error::mismatch("interpreter inputs", std::to_string(graph.inputs.size()), std::to_string(inputs.size()));
  }
  std::vector<at::Tensor> values(graph.values.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) values[graph.inputs[i]] = inputs[i];
  for (std::size_t id = 0; id < graph.values.size(); ++id) {
    if (!graph.values[id] || graph.values[id]->role != ValueRole::Constant) continue;
    auto it = graph.constants.find(static_cast<int>(id));
    if (it == graph.constants.end()) {
      throw Error(fmt::format("constant %{} ({}) has no data: the dump elided it (raise dump_constant_limit)", id,
                              graph.values[id]->type.to_string()));
    }
    values[id] = it->second;
  }
  for (const auto& node : graph.nodes) {
    auto results = AtenCall(node).run([&](int id) -> const at::Tensor& { return values[id]; });
    for (std::size_t r = 0; r < results.size(); ++r) values[node.outputs[r]] = std::move(results[r]);
  }
  return values;
}

}  // namespace zenith::ir
