// CUDA graphs for inference plans: at small batch a plan's launches are the host's whole cost, and
// a graph replays them as one (runtime/plan_graph.h says when a replay is correct).
#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "core/log.h"
#include "core/op_schema.h"
#include "runtime/engine.h"

namespace zenith::detail {
namespace {

// Why a replay, which reads the call's tensors from copies in the graph's own buffers, would differ
// from running the plan: a node writes an argument (the write would land in the copy) or an output
// is an argument's memory (the caller's result would no longer alias it). Empty when neither.
std::string argument_memory_refusal(const ir::Graph& graph, std::size_t arguments) {
  std::set<int> argument_memory(graph.inputs.begin(), graph.inputs.begin() + static_cast<std::ptrdiff_t>(arguments));
  for (const auto& node : graph.nodes) {
    const auto facts = ir::alias_facts(node);
    for (int id : facts.mutated_inputs) {
      if (argument_memory.count(id)) return fmt::format("{} writes into an argument", node.qualified_name());
    }
    const auto inputs = node.input_ids();
    const bool reads_argument =
        std::any_of(inputs.begin(), inputs.end(), [&](int id) { return argument_memory.count(id) > 0; });
    if (facts.is_view && reads_argument) argument_memory.insert(node.outputs.begin(), node.outputs.end());
  }
  for (int id : graph.outputs) {
    if (argument_memory.count(id)) return "it returns an argument or a view of one";
  }
  return "";
}

}  // namespace

void Engine::attach_inference_graph(Entry& entry, std::size_t state, bool say_why) const {
  if (!entry.plan) return;
  if (options_.keep_derived_values && !entry.derived) {
    entry.derived = DerivedValues::of(entry.plan, state, derived_counters_);
  }
  if (!options_.cuda_graphs) return;
  const auto& plan = *entry.plan;
  if (std::none_of(plan.steps.begin(), plan.steps.end(), [](const Step& step) { return step.device.is_cuda(); })) return;
  auto refuse = [&](const std::string& why) {
    if (say_why) log::info("{}: the plan is not replayed as a CUDA graph: {}", options_.name, why);
  };
  const auto launches = std::count_if(plan.steps.begin(), plan.steps.end(),
                                      [](const Step& step) { return step.kind == Step::Kind::Kernel; });
  if (launches < 2) {
    // A graph replaces many launches by one; for a single launch it only adds the copies of the
    // call's tensors in and out.
    return refuse(fmt::format("it makes {} kernel launch", launches));
  }
  if (!plan.value_checks.empty()) {
    // A check reads a value on the host in the middle of the plan, which a graph cannot do.
    return refuse(fmt::format("it checks {} values the forward read into C++", plan.value_checks.size()));
  }
  const auto inputs = plan.graph.inputs.size();
  const auto arguments = inputs - std::min(state, inputs);
  if (auto why = argument_memory_refusal(plan.graph, arguments); !why.empty()) return refuse(why);
  // Parameters and buffers are read where they lie (one replaced by a tensor elsewhere makes the
  // call run launch by launch, then the graph is captured again there); the call's tensors are
  // copied into the graph's buffers. Every output is copied out of
  // the graph's memory: the caller may keep a call's results past the next call.
  std::vector<bool> by_address(inputs, false);
  std::fill(by_address.begin() + static_cast<std::ptrdiff_t>(arguments), by_address.end(), true);
  std::string why;
  entry.graph = make_plan_graph(entry.plan, std::move(by_address), plan.graph.outputs.size(),
                                "the plan of " + options_.name, graph_counters_, why, entry.derived);
  if (!entry.graph) refuse(why);
}

}  // namespace zenith::detail
