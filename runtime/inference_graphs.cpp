// CUDA graphs for inference plans: at small batch a plan's launches are the host's whole cost, and
// a graph replays them as one (runtime/plan_graph.h says when a replay is correct).
#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "core/log.h"
#include "core/op_schema.h"
#include "runtime/engine.h"

namespace zenith::detail {
namespace {

// How the plan touches the call's own tensors, which a replay otherwise reads from copies in the
// graph's buffers.
struct ArgumentMemory {
  // Per argument: a node writes it in place (directly or through a view). Such an argument is
  // read where it lies, as a parameter is, so that the write lands in the caller's tensor (a
  // static KV cache written at the current position).
  std::vector<bool> written;
  // Why no replay can be correct, or empty: an output is an argument's memory (the caller's result
  // would no longer alias it).
  std::string refusal;
};

ArgumentMemory argument_memory(const ir::Graph& graph, std::size_t arguments) {
  ArgumentMemory memory;
  memory.written.assign(arguments, false);
  std::map<int, std::size_t> argument_of;  // value id -> the argument whose memory it is
  for (std::size_t i = 0; i < arguments; ++i) argument_of[graph.inputs[i]] = i;
  for (const auto& node : graph.nodes) {
    const auto facts = ir::alias_facts(node);
    for (int id : facts.mutated_inputs) {
      if (auto it = argument_of.find(id); it != argument_of.end()) memory.written[it->second] = true;
    }
    for (std::size_t k = 0; k < facts.output_writes.size() && k < node.outputs.size(); ++k) {
      auto it = argument_of.find(facts.output_writes[k]);
      if (it != argument_of.end()) argument_of.emplace(node.outputs[k], it->second);
    }
    if (!facts.is_view) continue;
    for (int id : node.input_ids()) {
      auto it = argument_of.find(id);
      if (it == argument_of.end()) continue;
      for (int out : node.outputs) argument_of.emplace(out, it->second);
      break;
    }
  }
  for (int id : graph.outputs) {
    if (argument_of.count(id)) {
      memory.refusal = "it returns an argument or a view of one";
      break;
    }
  }
  return memory;
}

}  // namespace

void Engine::attach_inference_graph(Entry& entry, std::size_t state, bool say_why) const {
  if (!entry.plan) return;
  if (options_.keep_derived_values && !entry.derived) {
    entry.derived = DerivedValues::of(entry.plan, state, derived_share_);
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
  const auto memory = argument_memory(plan.graph, arguments);
  if (!memory.refusal.empty()) return refuse(memory.refusal);
  // Parameters, buffers and the arguments the plan writes are read where they lie (one at another
  // address makes the call run launch by launch, then the graph is captured again there); the
  // call's other tensors are copied into the graph's buffers. Every output is copied out of the
  // graph's memory: the caller may keep a call's results past the next call, and the graphs of all
  // signatures share one pool, none keeping memory between its replays.
  std::vector<bool> by_address(inputs, true);
  for (std::size_t i = 0; i < arguments; ++i) by_address[i] = memory.written[i];
  std::string why;
  entry.graph = make_plan_graph(entry.plan, std::move(by_address), plan.graph.outputs.size(),
                                "the plan of " + options_.name, graph_counters_, why, entry.derived, graph_pool_);
  if (!entry.graph) refuse(why);
}

}  // namespace zenith::detail
