#include "inspect/replay.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "common/random_tensors.h"
#include "common/tensor_compare.h"
#include "runtime/executor.h"
#include "runtime/replay_profile.h"
#include "core/interpreter.h"
#include "core/plugin_loader.h"
#include "passes/lowering.h"
#include "zenith/error.h"

namespace zenith::inspect {
namespace {

std::string describe_value(const ir::Value& value) {
  auto name = value.name.empty() ? "" : fmt::format(" '{}'", value.name);
  return fmt::format("{} %{}{} ({})", ir::role_name(value.role), value.id, name, value.type.to_string());
}

void check_constants(const ir::Graph& graph) {
  for (const auto& value : graph.values) {
    if (value && value->role == ir::ValueRole::Constant && !graph.constants.count(value->id)) {
      throw Error(fmt::format("cannot replay: {} has no data in this dump (it was larger than the dump's constant "
                              "limit); raise CompileOptions::dump_constant_limit and dump again",
                              describe_value(*value)));
    }
  }
}

// The reader accepts any integers as sizes and strides; drawing a tensor needs sensible ones.
void check_layout(const ir::Value& value) {
  const auto& type = value.type;
  for (std::size_t d = 0; d < type.sizes.size(); ++d) {
    if (type.sizes[d] < 0 || type.strides[d] < 0) {
      throw Error(fmt::format("cannot replay: {} has a negative size or stride", describe_value(value)));
    }
  }
}

void check_inputs(const ir::Graph& graph) {
  for (const auto& value : graph.values) {
    if (value && value->role != ir::ValueRole::Intermediate) {
      check_layout(*value);
      tools::require_device(value->type.device, "cannot replay: " + describe_value(*value));
    }
  }
}

// Drawn afresh for each run: an in-place op in the graph must not feed one run's writes to the other.
std::vector<at::Tensor> make_inputs(const ir::Graph& graph, std::uint64_t seed) {
  at::manual_seed(seed);
  std::vector<at::Tensor> inputs;
  for (int id : graph.inputs) inputs.push_back(tools::random_tensor(graph.value(id).type));
  return inputs;
}

void note_integer_inputs(const ir::Graph& graph, std::ostream& out) {
  for (int id : graph.inputs) {
    const auto& value = graph.value(id);
    if (!c10::isFloatingType(value.type.dtype) && !c10::isComplexType(value.type.dtype)) {
      out << fmt::format("note: {} is drawn from {{0, 1}}: small enough to index anything, but the model may "
                         "mean more by it\n", describe_value(value));
    }
  }
}

void flatten(const ir::OutputStructure& structure, const c10::IValue& nested, std::vector<at::Tensor>& flat) {
  if (structure.kind == ir::OutputStructure::Kind::Tensor) {
    flat.at(structure.index) = nested.toTensor();
    return;
  }
  if (structure.kind == ir::OutputStructure::Kind::Constant) return;
  if (structure.kind == ir::OutputStructure::Kind::Dict) {
    auto dict = nested.toGenericDict();
    for (std::size_t i = 0; i < structure.elements.size(); ++i) {
      flatten(structure.elements[i], dict.at(structure.keys.at(i)), flat);
    }
    return;
  }
  auto elements = structure.kind == ir::OutputStructure::Kind::Tuple ? nested.toTupleRef().elements().vec()
                                                                     : nested.toListRef().vec();
  for (std::size_t i = 0; i < structure.elements.size(); ++i) flatten(structure.elements[i], elements.at(i), flat);
}

Plan make_plan(const ir::Graph& graph, const ReplayOptions& options, std::ostream& out) {
  CompileReport report;
  auto backends = order_backends(discover_backends(options.plugin_paths), {});
  auto plan = passes::lower_to_plan(graph, backends, report);
  std::string placement;
  for (const auto& [backend, count] : report.nodes_per_backend) placement += fmt::format(", {}: {}", backend, count);
  out << fmt::format("plan: {} steps ({} host nodes{})\n", plan.steps.size(), report.host_nodes, placement);
  return plan;
}

std::vector<at::Tensor> run_plan(const Plan& plan, const ReplayOptions& options) {
  std::vector<at::Tensor> flat(plan.graph.outputs.size());
  flatten(plan.graph.output_structure, execute(plan, make_inputs(plan.graph, options.seed)), flat);
  return flat;
}

// The checked run came first: it loaded the kernels, so the timed runs show a steady state.
void profile_plan(const Plan& plan, const std::string& module, const ReplayOptions& options, std::ostream& out) {
  ReplayProfile profile(module);
  auto inputs = make_inputs(plan.graph, options.seed);
  for (int run = 1; run <= options.trace_runs; ++run) {
    StepTimer timer(profile.origin());
    execute(plan, inputs, &timer);
    profile.add_run(plan, timer.finish(), fmt::format("replay run {}", run));
  }
  profile.write(options.trace_path);
  out << fmt::format("profile: {} runs of {} steps written to {} (open it in ui.perfetto.dev or chrome://tracing)\n",
                     options.trace_runs, plan.steps.size(), options.trace_path);
}

bool report_output(std::size_t index, const at::Tensor& actual, const at::Tensor& expected, std::ostream& out) {
  auto tolerance = tools::tolerance_for(expected.scalar_type());
  auto result = tools::compare_tensors(actual, expected, tolerance);
  auto verdict = result.matches ? "match" : "DIFFERS";
  auto detail = result.problem.empty() ? fmt::format("max abs diff {:g}", result.max_abs_diff) : result.problem;
  out << fmt::format("output {}: {} {}  {}  ({}): {}\n", index, c10::str(expected.sizes()),
                     ir::dtype_name(expected.scalar_type()), detail, tools::describe(tolerance), verdict);
  return result.matches;
}

}  // namespace

int replay(const Dump& dump, const ReplayOptions& options, std::ostream& out) {
  const auto& graph = dump.optimized;
  check_constants(graph);
  check_inputs(graph);
  out << fmt::format("replaying {} ({} nodes, {} inputs, {} outputs) with seed {}\n",
                     dump.module_name.empty() ? "(unnamed)" : dump.module_name, graph.nodes.size(),
                     graph.inputs.size(), graph.outputs.size(), options.seed);
  note_integer_inputs(graph, out);
  auto plan = make_plan(graph, options, out);
  auto actual = run_plan(plan, options);
  auto expected = ir::interpret(graph, make_inputs(graph, options.seed));
  std::size_t matching = 0;
  for (std::size_t i = 0; i < expected.size(); ++i) matching += report_output(i, actual[i], expected[i], out) ? 1 : 0;
  out << fmt::format("{} of {} outputs match the reference interpreter\n", matching, expected.size());
  if (!options.trace_path.empty()) profile_plan(plan, dump.module_name.empty() ? "replay" : dump.module_name, options, out);
  return matching == expected.size() ? 0 : 1;
}

}  // namespace zenith::inspect
