#include "runtime/value_checks.h"

#include <algorithm>

#include <fmt/format.h>

#include "passes/effects.h"
#include "zenith/error.h"

namespace zenith::detail {

std::string value_check_refusal(const capture::Capture& capture) {
  const auto& graph = capture.graph;
  const auto effects = passes::analyse_effects(graph);
  if (int n = passes::first_visible_effect(effects); n >= 0) {
    return fmt::format("the forward reads its data into C++ ({}) and {} at node {} has an effect the caller sees (it "
                       "writes an argument, a parameter or a buffer, or draws random numbers), so a plan could not "
                       "stop at a changed value",
                       capture.value_guards.front().op, graph.nodes[n].qualified_name(), n);
  }
  const std::size_t first = graph.outputs.size() - capture.value_guards.size();
  for (std::size_t k = first; k < graph.outputs.size(); ++k) {
    const int id = graph.outputs[k];
    if (static_cast<std::size_t>(id) < effects.value_mutable.size() && effects.value_mutable[id]) {
      return fmt::format("the forward reads a tensor into C++ ({}) that it writes in place afterwards",
                         capture.value_guards[k - first].op);
    }
  }
  return "";
}

void attach_value_checks(Plan& plan, const capture::Capture& capture) {
  const auto& outputs = plan.graph.outputs;
  const std::size_t first = outputs.size() - capture.value_guards.size();
  for (std::size_t k = first; k < outputs.size(); ++k) {
    const auto& guard = capture.value_guards[k - first];
    ValueCheck check{outputs[k], guard.expected, guard.op, -1};
    const auto& inputs = plan.graph.inputs;
    if (std::find(inputs.begin(), inputs.end(), check.value) == inputs.end()) {
      auto computes = [&](const Step& step) {
        return std::find(step.outputs.begin(), step.outputs.end(), check.value) != step.outputs.end();
      };
      auto step = std::find_if(plan.steps.begin(), plan.steps.end(), computes);
      if (step == plan.steps.end()) {
        throw Error(fmt::format("value checks: no step of the plan computes %{}, the tensor {} read", check.value,
                                guard.op));
      }
      check.after_step = static_cast<int>(step - plan.steps.begin());
    }
    plan.value_checks.push_back(std::move(check));
  }
  std::stable_sort(plan.value_checks.begin(), plan.value_checks.end(),
                   [](const ValueCheck& a, const ValueCheck& b) { return a.after_step < b.after_step; });
}

std::vector<std::string> describe_value_checks(const Plan& plan) {
  std::vector<std::string> lines;
  for (const auto& check : plan.value_checks) {
    const auto when = check.after_step < 0 ? std::string("before the first step")
                                           : fmt::format("after step {} of {}", check.after_step, plan.steps.size());
    lines.push_back(fmt::format("{} of {} (graph value %{}), checked {}", check.op,
                                plan.graph.value(check.value).type.to_string(), check.value, when));
  }
  return lines;
}

}  // namespace zenith::detail
