#include "passes/lowering.h"

#include <atomic>
#include <exception>
#include <mutex>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "core/log.h"
#include "passes/partition.h"

namespace zenith::passes {

namespace {

// Compiles every claimed group, several at a time: NVRTC compiles dominate the cost of a new plan,
// and plugins must accept concurrent compiles (include/zenith/plugin.h). Results keep their order;
// the first failure is rethrown after all workers stop.
std::vector<std::pair<std::shared_ptr<Kernel>, CompileOutcome>> compile_groups(const std::vector<PlacedGroup>& placed,
                                                                              const std::string& backend_options) {
  std::vector<std::pair<std::shared_ptr<Kernel>, CompileOutcome>> kernels(placed.size());
  std::vector<std::size_t> todo;
  for (std::size_t i = 0; i < placed.size(); ++i)
    if (placed[i].backend != nullptr) todo.push_back(i);
  std::atomic<std::size_t> next{0};
  std::mutex failure_mutex;
  std::exception_ptr failure;
  auto work = [&] {
    for (std::size_t k = next++; k < todo.size(); k = next++) {
      const auto& item = placed[todo[k]];
      try {
        CompileOutcome outcome;
        auto kernel = item.backend->compile(item.group_json, backend_options, &outcome);
        kernels[todo[k]] = {std::move(kernel), outcome};
      } catch (...) {
        std::lock_guard<std::mutex> lock(failure_mutex);
        if (!failure) failure = std::current_exception();
      }
    }
  };
  std::size_t threads = std::min<std::size_t>(todo.size(), std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> workers;
  for (std::size_t t = 1; t < threads; ++t) workers.emplace_back(work);
  work();  // the calling thread works too
  for (auto& worker : workers) worker.join();
  if (failure) std::rethrow_exception(failure);
  return kernels;
}

}  // namespace

Plan lower_to_plan(ir::Graph graph, const std::vector<const Backend*>& backends, CompileReport& report,
                   const std::string& backend_options) {
  auto placed = order_steps(graph, partition(graph, backends));
  auto kernels = compile_groups(placed, backend_options);
  Plan plan;
  for (std::size_t index = 0; index < placed.size(); ++index) {
    auto& item = placed[index];
    Step step;
    const auto& group = item.group.graph;
    step.inputs = group.inputs;
    step.outputs = group.outputs;
    step.output_aliases = group.output_aliases;
    step.nodes = item.group.nodes;
    for (int id : group.outputs) step.output_types.push_back(group.value(id).type);
    if (item.backend == nullptr) {
      const auto& node = graph.nodes[item.group.nodes.at(0)];
      step.kind = Step::Kind::Host;
      step.backend = item.eager ? "eager" : "host";
      step.host_call = std::make_shared<ir::AtenCall>(node);
      // A host step binds every result of its node, not only those read later.
      step.outputs = node.outputs;
      if (item.eager) {
        step.declined = item.declined;
        std::string why;
        for (const auto& line : item.declined) why += (why.empty() ? "" : "; ") + line;
        report.graph_breaks.push_back(fmt::format("{}: {}", node.qualified_name(), why.empty() ? "no backend" : why));
        log::info("graph break: {} runs eagerly between kernels, as no backend claims it ({})", node.qualified_name(),
                  why.empty() ? "no backend is loaded" : why);
      } else {
        report.host_nodes += 1;
      }
    } else {
      step.kind = Step::Kind::Kernel;
      step.backend = item.backend->name();
      step.declined = item.declined;
      step.device = step.output_types.empty() ? group.value(group.inputs.at(0)).type.device
                                              : step.output_types.front().device;
      step.kernel = std::move(kernels[index].first);
      step.shape_generic = kernels[index].second.shape_generic;
      step.max_extent = kernels[index].second.max_extent;
      switch (kernels[index].second.source) {
        case ZN_COMPILE_COMPILED: report.kernels_compiled += 1; break;
        case ZN_COMPILE_FROM_CACHE: report.kernel_cache_hits += 1; break;
        case ZN_COMPILE_NOTHING: report.groups_without_compile += 1; break;
      }
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
