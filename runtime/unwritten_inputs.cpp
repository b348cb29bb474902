#include "runtime/unwritten_inputs.h"

#include <algorithm>
#include <set>

#include "core/read_only_values.h"
#include "runtime/derived_values.h"

namespace zenith {

UnwrittenInputs unwritten_inputs(const Plan& plan, const DerivedValues* derived) {
  auto unwritten = ir::read_only_values(plan.graph);
  UnwrittenInputs result(plan.steps.size());
  for (std::size_t s = 0; s < plan.steps.size(); ++s) {
    const auto& step = plan.steps[s];
    if (derived != nullptr && derived->derived(s)) {
      // Computed before the graph runs, and only from memory nothing in it writes: its results
      // stay as they are while the graph runs (the derivation writes nothing in place, and no step
      // writes what it makes: DerivedValues::of).
      const bool settled = std::all_of(step.inputs.begin(), step.inputs.end(), [&](int id) { return unwritten[id]; });
      for (int id : step.outputs) unwritten[id] = settled;
      continue;
    }
    if (step.kind != Step::Kind::Kernel) continue;
    auto& entry = result[s];
    for (int id : step.inputs) entry.push_back(unwritten[id] ? 1 : 0);
  }
  return result;
}

bool read_only_memory_shared(const Plan& plan, const std::vector<at::Tensor>& inputs) {
  const auto& graph = plan.graph;
  const auto read_only = ir::read_only_values(graph);
  std::set<const void*> fixed, other;
  auto note = [&](int id, const at::Tensor& tensor) {
    if (!tensor.defined() || !tensor.has_storage()) return;
    (read_only[id] ? fixed : other).insert(tensor.storage().unsafeGetStorageImpl());
  };
  for (std::size_t i = 0; i < inputs.size() && i < graph.inputs.size(); ++i) note(graph.inputs[i], inputs[i]);
  for (const auto& [id, tensor] : graph.constants) note(id, tensor);
  return std::any_of(fixed.begin(), fixed.end(), [&](const void* storage) { return other.count(storage) > 0; });
}

UnwrittenInputs nothing_unwritten(UnwrittenInputs unwritten) {
  for (auto& entry : unwritten) std::fill(entry.begin(), entry.end(), std::uint8_t{0});
  return unwritten;
}

}  // namespace zenith
