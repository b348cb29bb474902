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

namespace {

// Runs every node in order; `ran` sees each node's index after its results are in `values`.
template <typename AfterNode>
void run_nodes(const Graph& graph, const std::vector<at::Tensor>& inputs, std::vector<at::Tensor>& values,
               AfterNode ran) {
  // The graph holds the casts autocast made when it was traced; autocast must not cast again.
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  if (inputs.size() != graph.inputs.size()) {
    throw Error::mismatch("interpreter inputs", std::to_string(graph.inputs.size()), std::to_string(inputs.size()));
  }
  values.assign(graph.values.size(), at::Tensor());
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
  for (std::size_t n = 0; n < graph.nodes.size(); ++n) {
    const auto& node = graph.nodes[n];
    auto results = AtenCall(node).run([&](int id) -> const at::Tensor& { return values[id]; });
    for (std::size_t r = 0; r < results.size(); ++r) values[node.outputs[r]] = std::move(results[r]);
    ran(n);
  }
}

}  // namespace

std::vector<at::Tensor> interpret_values(const Graph& graph, const std::vector<at::Tensor>& inputs) {
  std::vector<at::Tensor> values;
  run_nodes(graph, inputs, values, [](std::size_t) {});
  return values;
}

std::vector<std::vector<std::int64_t>> interpret_strides(const Graph& graph, const std::vector<at::Tensor>& inputs) {
  std::vector<std::size_t> last_reader(graph.values.size(), 0);
  for (std::size_t n = 0; n < graph.nodes.size(); ++n) {
    for (int id : graph.nodes[n].input_ids()) last_reader[static_cast<std::size_t>(id)] = n;
  }
  std::vector<std::vector<std::int64_t>> strides(graph.values.size());
  std::vector<at::Tensor> values;
  for (std::size_t i = 0; i < inputs.size() && i < graph.inputs.size(); ++i) {
    if (inputs[i].defined()) strides[static_cast<std::size_t>(graph.inputs[i])] = inputs[i].strides().vec();
  }
  run_nodes(graph, inputs, values, [&](std::size_t n) {
    const auto& node = graph.nodes[n];
    for (int id : node.outputs) {
      if (values[id].defined()) strides[static_cast<std::size_t>(id)] = values[id].strides().vec();
      if (last_reader[static_cast<std::size_t>(id)] <= n) values[id].reset();  // read by no later node
    }
    for (int id : node.input_ids()) {
      if (last_reader[static_cast<std::size_t>(id)] == n) values[id].reset();
    }
  });
  return strides;
}

}  // namespace zenith::ir
