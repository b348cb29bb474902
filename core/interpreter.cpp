#include "core/interpreter.h"

#include <c10/core/impl/LocalDispatchKeySet.h>
#include <fmt/format.h>

#include "core/aten_call.h"
#include "core/tensor_type.h"
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

TypedRun interpret_types(const Graph& graph, const std::vector<at::Tensor>& inputs, const KeepValue& keep) {
  std::vector<std::size_t> last_reader(graph.values.size(), 0);
  std::vector<bool> held(graph.values.size(), false);
  for (int id : graph.inputs) held[static_cast<std::size_t>(id)] = true;
  for (std::size_t n = 0; n < graph.nodes.size(); ++n) {
    for (int id : graph.nodes[n].input_ids()) last_reader[static_cast<std::size_t>(id)] = n;
  }
  TypedRun run;
  run.types.resize(graph.values.size());
  for (std::size_t i = 0; i < inputs.size() && i < graph.inputs.size(); ++i) {
    if (inputs[i].defined()) run.types[static_cast<std::size_t>(graph.inputs[i])] = type_of(inputs[i]);
  }
  for (const auto& [id, tensor] : graph.constants) {  // held by the graph anyway
    if (static_cast<std::size_t>(id) >= run.types.size() || !tensor.defined()) continue;
    run.types[id] = type_of(tensor);
    held[static_cast<std::size_t>(id)] = true;
  }
  auto& values = run.kept;
  auto drop = [&](int id, std::size_t n) {
    const auto k = static_cast<std::size_t>(id);
    if (!held[k] && last_reader[k] <= n) values[k].reset();  // read by no later node
  };
  run_nodes(graph, inputs, values, [&](std::size_t n) {
    const auto& node = graph.nodes[n];
    for (int id : node.outputs) {
      if (values[id].defined()) {
        run.types[static_cast<std::size_t>(id)] = type_of(values[id]);
        held[static_cast<std::size_t>(id)] = keep && keep(id, values[id]);
      }
      drop(id, n);
    }
    for (int id : node.input_ids()) drop(id, n);
  });
  return run;
}

std::vector<std::vector<std::int64_t>> interpret_strides(const Graph& graph, const std::vector<at::Tensor>& inputs) {
  const auto run = interpret_types(graph, inputs, nullptr);
  std::vector<std::vector<std::int64_t>> strides(graph.values.size());
  for (std::size_t id = 0; id < run.types.size(); ++id) {
    if (run.types[id]) strides[id] = run.types[id]->strides;
  }
  return strides;
}

}  // namespace zenith::ir
