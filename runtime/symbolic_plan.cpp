#include "runtime/symbolic_plan.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/aten_call.h"
#include "core/graph_json.h"
#include "core/group.h"
#include "zenith/error.h"

namespace zenith::capture {
namespace {

struct FittedSlot {
  std::size_t index;
  std::int64_t base;
  SizePolynomial polynomial;
};

// Fits every slot that changes across `graphs` (same structure, design order). Returns the fitted
// slots, or why one follows no polynomial.
std::variant<std::vector<FittedSlot>, std::string> fit_slots(const std::vector<const ir::Graph*>& graphs,
                                                             const std::vector<IntSlot>& slots,
                                                             const ProbeDesign& design) {
  std::vector<std::vector<std::int64_t>> values;
  for (const auto* graph : graphs) values.push_back(read_slots(*graph, slots));
  std::vector<FittedSlot> fitted;
  std::vector<std::int64_t> seen(graphs.size());
  for (std::size_t i = 0; i < slots.size(); ++i) {
    for (std::size_t k = 0; k < graphs.size(); ++k) seen[k] = values[k][i];
    if (std::all_of(seen.begin(), seen.end(), [&](std::int64_t v) { return v == seen[0]; })) continue;
    auto polynomial = SizePolynomial::fit(design, seen);
    if (!polynomial) {
      std::vector<std::string> pairs;
      for (std::size_t k = 0; k < seen.size(); ++k) pairs.push_back(fmt::format("{} at [{}]", seen[k], fmt::join(design.points[k], ", ")));
      return fmt::format("{} is no polynomial of degree 2 in the symbolic sizes: {}", slots[i].describe(*graphs[0]),
                         fmt::join(pairs, ", "));
    }
    fitted.push_back({i, seen[0], std::move(*polynomial)});
  }
  return fitted;
}

// The most elements a kernel step addresses: the broadcast shape of its tensors, and each tensor's
// extent. A kernel with 32-bit offsets serves only up to its max_extent.
std::int64_t largest_index_space(const ir::Graph& graph, const Step& step) {
  std::vector<std::int64_t> broadcast;
  std::int64_t largest = 0;
  auto visit = [&](int id) {
    const auto& type = graph.value(id).type;
    largest = std::max(largest, type.numel());
    std::int64_t extent = 1;
    for (std::size_t d = 0; d < type.sizes.size(); ++d) {
      if (type.sizes[d] == 0) return;
      extent += (type.sizes[d] - 1) * std::abs(type.strides[d]);
    }
    largest = std::max(largest, extent);
    if (broadcast.size() < type.sizes.size()) broadcast.insert(broadcast.begin(), type.sizes.size() - broadcast.size(), 1);
    const std::size_t offset = broadcast.size() - type.sizes.size();
    for (std::size_t d = 0; d < type.sizes.size(); ++d) broadcast[offset + d] = std::max(broadcast[offset + d], type.sizes[d]);
  };
  for (int id : step.inputs) visit(id);
  for (int id : step.outputs) visit(id);
  std::int64_t elements = 1;
  for (auto size : broadcast) elements *= size;
  return std::max(largest, elements);
}

}  // namespace

std::string describe_dims(const std::vector<DynamicDim>& dims) {
  std::vector<std::string> parts;
  for (const auto& dim : dims) parts.push_back(fmt::format("argument {} dim {}", dim.argument, dim.dim));
  return fmt::format("{}", fmt::join(parts, ", "));
}

std::string describe_symbols(const std::vector<DynamicDim>& dims, const std::vector<int>& symbol_of) {
  std::vector<std::string> symbols;
  for (std::size_t k = 0; k < dims.size(); ++k) {
    const auto symbol = static_cast<std::size_t>(symbol_of[k]);
    if (symbols.size() <= symbol) symbols.resize(symbol + 1);
    symbols[symbol] += fmt::format("{}argument {} dim {}", symbols[symbol].empty() ? "" : " = ", dims[k].argument,
                                   dims[k].dim);
  }
  return fmt::format("{}", fmt::join(symbols, ", "));
}

std::string mark_size_dependent(std::vector<ir::Graph*> captures, const ProbeDesign& design) {
  std::vector<const ir::Graph*> graphs(captures.begin(), captures.end());
  for (std::size_t k = 1; k < graphs.size(); ++k) {
    if (auto why = structure_difference(*graphs[0], *graphs[k]); !why.empty()) {
      return fmt::format("the forward records another program at sizes [{}]: {}", fmt::join(design.points[k], ", "), why);
    }
  }
  const auto slots = int_slots(*graphs[0]);
  auto fitted = fit_slots(graphs, slots, design);
  if (auto* why = std::get_if<std::string>(&fitted)) return *why;
  for (const auto& slot : std::get<std::vector<FittedSlot>>(fitted)) {
    if (slots[slot.index].kind != IntSlot::Kind::Argument) continue;
    for (auto* graph : captures) graph->nodes[slots[slot.index].owner].size_dependent = true;
  }
  return "";
}

std::variant<SymbolicPlan, std::string> SymbolicPlan::fit(std::vector<DynamicDim> dims, std::vector<int> symbol_of,
                                                          const ProbeDesign& design,
                                                          Signature signature, std::vector<int> tensor_arguments,
                                                          const std::vector<std::shared_ptr<const Plan>>& plans) {
  for (std::size_t k = 1; k < plans.size(); ++k) {
    if (auto why = plan_difference(*plans[0], *plans[k]); !why.empty()) {
      return fmt::format("the plan at sizes [{}] differs: {}", fmt::join(design.points[k], ", "), why);
    }
  }
  SymbolicPlan plan;
  plan.dims_ = std::move(dims);
  plan.symbol_of_ = std::move(symbol_of);
  plan.signature_ = std::move(signature);
  plan.tensor_arguments_ = std::move(tensor_arguments);
  plan.base_ = plans[0];
  plan.slots_ = int_slots(plans[0]->graph);
  std::vector<const ir::Graph*> graphs;
  for (const auto& p : plans) graphs.push_back(&p->graph);
  auto fitted = fit_slots(graphs, plan.slots_, design);
  if (auto* why = std::get_if<std::string>(&fitted)) return *why;
  std::vector<bool> node_symbolic(plans[0]->graph.nodes.size(), false);
  for (auto& slot : std::get<std::vector<FittedSlot>>(fitted)) {
    if (plan.slots_[slot.index].kind == IntSlot::Kind::Argument) node_symbolic[plan.slots_[slot.index].owner] = true;
    plan.symbolic_.push_back({slot.index, slot.base, std::move(slot.polynomial)});
  }
  for (const auto& step : plans[0]->steps) {
    bool symbolic = std::any_of(step.nodes.begin(), step.nodes.end(), [&](int n) { return node_symbolic[n]; });
    plan.step_arguments_symbolic_.push_back(symbolic);
  }
  return plan;
}

std::string SymbolicPlan::signature_mismatch(const Signature& signature) const {
  if (signature.args.size() != signature_.args.size()) {
    return fmt::format("{} arguments instead of {}", signature.args.size(), signature_.args.size());
  }
  for (std::size_t i = 0; i < signature.args.size(); ++i) {
    const auto& want = signature_.args[i];
    const auto& got = signature.args[i];
    if (want.is_tensor != got.is_tensor || (!want.is_tensor && want.scalar != got.scalar)) {
      return fmt::format("argument {} is {} instead of {} (non-tensor arguments are part of the plan)", i,
                         got.is_tensor ? "a tensor" : got.scalar, want.is_tensor ? "a tensor" : want.scalar);
    }
    if (!want.is_tensor) continue;
    const auto& a = want.tensor;
    const auto& b = got.tensor;
    if (a.dtype != b.dtype || a.device != b.device || a.rank() != b.rank() || a.requires_grad != b.requires_grad) {
      return fmt::format("argument {} is {}; the symbolic plan takes {}", i, b.to_string(), a.to_string());
    }
  }
  if (signature.grad_mode != signature_.grad_mode || signature.training != signature_.training) {
    return "grad mode or training flag changed";
  }
  if (signature.state_fingerprint != signature_.state_fingerprint) return "a parameter or buffer changed";
  return "";
}

std::string SymbolicPlan::guard(const SymbolicSlot& slot, std::int64_t value) const {
  const auto& where = slots_[slot.index];
  bool holds = true;
  switch (where.kind) {
    // Sizes of 0 and 1 change what kernels do (empty loops, broadcasting): they stay what they were.
    case IntSlot::Kind::Size: holds = slot.base >= 2 ? value >= 2 : value == slot.base; break;
    case IntSlot::Kind::Stride: break;
    // An argument that changes sign means something else (a slice end counted from the back).
    case IntSlot::Kind::Argument:
      holds = (slot.base > 0 && value > 0) || (slot.base == 0 && value == 0) || (slot.base < 0 && value < 0);
      break;
  }
  if (holds) return "";
  return fmt::format("{} would be {} (it was {} at the base sizes)", where.describe(base_->graph), value, slot.base);
}

Instance SymbolicPlan::instantiate(const Signature& signature, const std::string& backend_options) const {
  Instance instance;
  if (auto why = signature_mismatch(signature); !why.empty()) {
    instance.refusal = why;
    return instance;
  }
  // Each symbol's size from its first dim; the input check below holds the others to it.
  std::vector<std::int64_t> sizes;
  for (std::size_t k = 0; k < dims_.size(); ++k) {
    if (static_cast<std::size_t>(symbol_of_[k]) < sizes.size()) continue;
    sizes.push_back(signature.args[dims_[k].argument].tensor.sizes[static_cast<std::size_t>(dims_[k].dim)]);
  }
  auto plan = std::make_shared<Plan>(*base_);
  for (const auto& slot : symbolic_) {
    auto value = slot.polynomial.at(sizes);
    if (!value) {
      instance.refusal = fmt::format("{} is no integer at sizes [{}]", slots_[slot.index].describe(base_->graph),
                                     fmt::join(sizes, ", "));
      return instance;
    }
    if (auto why = guard(slot, *value); !why.empty()) {
      instance.refusal = why;
      return instance;
    }
    write_slot(plan->graph, slots_[slot.index], *value);
  }
  // Every size and stride of the call's tensors must be what the plan now expects: a dimension that
  // is not symbolic kept its size, and the layout follows the sizes as it did at the base.
  for (std::size_t k = 0; k < tensor_arguments_.size(); ++k) {
    const auto expected = without_unit_dim_strides(plan->graph.value(plan->graph.inputs[k]).type);
    const auto& got = signature.args[tensor_arguments_[k]].tensor;  // without_unit_dim_strides too
    if (expected.sizes != got.sizes || expected.strides != got.strides) {
      instance.refusal = fmt::format("argument {} is {}; at these sizes the symbolic plan expects {}",
                                     tensor_arguments_[k], got.to_string(), expected.to_string());
      return instance;
    }
  }
  std::vector<std::vector<int>> consumers;
  for (std::size_t s = 0; s < plan->steps.size(); ++s) {
    auto& step = plan->steps[s];
    if (step.kind == Step::Kind::Host) {
      if (step_arguments_symbolic_[s]) step.host_call = std::make_shared<ir::AtenCall>(plan->graph.nodes[step.nodes.at(0)]);
      continue;
    }
    for (std::size_t o = 0; o < step.outputs.size(); ++o) step.output_types[o] = plan->graph.value(step.outputs[o]).type;
    const bool fits = step.shape_generic &&
                      (step.max_extent == 0 || largest_index_space(plan->graph, step) <= step.max_extent);
    if (fits && !step_arguments_symbolic_[s]) continue;
    // Compiled again for these sizes: dispatcher groups bind new arguments (no compiler runs), a
    // kernel past its 32-bit offsets gets its 64-bit version.
    if (consumers.empty()) consumers = plan->graph.consumers();
    auto group = ir::extract_group(plan->graph, step.nodes, consumers);
    if (group.graph.inputs != step.inputs || group.graph.outputs != step.outputs) {
      instance.refusal = fmt::format("step {} reads or writes other values at these sizes", s);
      return instance;
    }
    CompileOutcome outcome;
    try {
      step.kernel = step.kernel->backend().compile(ir::to_json(group.graph, ir::GraphKind::Group, 0).dump(),
                                                   backend_options, &outcome);
    } catch (const Error& error) {
      instance.refusal = fmt::format("step {} on {} could not be compiled for these sizes: {}", s, step.backend,
                                     error.what());
      return instance;
    }
    step.shape_generic = outcome.shape_generic;
    step.max_extent = outcome.max_extent;
    if (outcome.source == ZN_COMPILE_COMPILED) ++instance.kernels_compiled;
  }
  instance.plan = std::move(plan);
  return instance;
}

}  // namespace zenith::capture
