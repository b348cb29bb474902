#include "passes/lowering.h"

#include <set>

#include "passes/partition.h"

namespace zenith::passes {

Plan lower_to_plan(ir::Graph graph, const std::vector<const Backend*>& backends, CompileReport& report,
                   const std::string& backend_options) {
  auto placed = order_steps(graph, partition(graph, backends));
  Plan plan;
  for (auto& item : placed) {
    Step step;
    const auto& group = item.group.graph;
    step.inputs = group.inputs;
    step.outputs = group.outputs;
    step.output_aliases = group.output_aliases;
    step.nodes = item.group.nodes;
    for (int id : group.outputs) step.output_types.push_back(group.value(id).type);
    if (item.backend == nullptr) {
      step.kind = Step::Kind::Host;
      step.backend = "host";
      step.host_call = std::make_shared<ir::AtenCall>(graph.nodes[item.group.nodes.at(0)]);
      // A host step binds every result of its node, not only those read later.
      step.outputs = graph.nodes[item.group.nodes.at(0)].outputs;
      report.host_nodes += 1;
    } else {
      step.kind = Step::Kind::Kernel;
      step.backend = item.backend->name();
      bool from_cache = false;
      step.kernel = item.backend->compile(item.group_json, backend_options, &from_cache);
      (from_cache ? report.kernel_cache_hits : report.kernels_compiled) += 1;
      report.groups += 1;
      report.nodes_per_backend[step.backend] += static_cast<std::int64_t>(item.group.nodes.size());
    }
    plan.steps.push_back(std::move(step));
  }
  plan.graph = std::move(graph);
  plan_memory(plan);
  return plan;
}

void plan_memory(Plan& plan) {
  const auto& graph = plan.graph;
  std::vector<int> last_reader(graph.values.size(), -1);
  for (std::size_t s = 0; s < plan.steps.size(); ++s) {
    for (int id : plan.steps[s].inputs) last_reader[id] = static_cast<int>(s);
  }
  std::set<int> kept(graph.outputs.begin(), graph.outputs.end());
  kept.insert(graph.inputs.begin(), graph.inputs.end());
  for (const auto& [id, tensor] : graph.constants) kept.insert(id);
  for (auto& step : plan.steps) step.release_after.clear();
  for (std::size_t id = 0; id < last_reader.size(); ++id) {
    if (last_reader[id] >= 0 && !kept.count(static_cast<int>(id))) {
      plan.steps[last_reader[id]].release_after.push_back(static_cast<int>(id));
    }
  }
}

}  // namespace zenith::passes
