// Symbolic plans: which dimensions to make symbolic, the probe captures at other sizes, fitting a
// plan over them, and serving a new signature from a fitted plan.
#include "runtime/engine.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/exception_message.h"
#include "core/log.h"
#include "passes/effects.h"
#include "runtime/call_tensors.h"
#include "runtime/dynamic_dims.h"

namespace zenith::detail {

std::vector<DynamicDim> Engine::dims_to_make_symbolic(const Signature& signature) const {
  if (options_.dynamic_shapes == DynamicShapes::Off) return {};
  auto dims = options_.dynamic_dims;
  if (last_signature_) dims = capture::merge_dims(dims, capture::changed_dims(*last_signature_, signature));
  if (dims.empty() || refused_dims_.count(capture::describe_dims(dims))) return {};
  return dims;
}

std::shared_ptr<const Engine::Entry> Engine::instantiate_symbolic(const Signature& signature, std::size_t state,
                                                                  std::string& refusal) {
  for (auto it = symbolic_plans_.begin(); it != symbolic_plans_.end(); ++it) {
    auto instance = it->instantiate(signature, backend_options_);
    stats_.kernels_compiled += instance.kernels_compiled;
    if (!instance.plan) {
      refusal += fmt::format("{}the plan over {}: {}", refusal.empty() ? "" : "; ", it->describe(),
                             instance.refusal);
      continue;
    }
    log::debug("{}: a symbolic plan over {} serves {}", options_.name, it->describe(),
               signature.to_string());
    symbolic_plans_.splice(symbolic_plans_.begin(), symbolic_plans_, it);
    auto entry = std::make_shared<Entry>();
    entry->plan = std::move(instance.plan);
    entry->derived = shared_derived_values(*it, state);
    // Its base plan already said why it is not graphed, if it is not: one line per module, not per size.
    attach_inference_graph(*entry, state, /*say_why=*/false);
    return entry;
  }
  return nullptr;
}

std::shared_ptr<const DerivedValues> Engine::shared_derived_values(capture::SymbolicPlan& symbolic, std::size_t state) {
  if (!options_.keep_derived_values) return nullptr;
  if (!symbolic.derived) symbolic.derived = DerivedValues::of(symbolic.base(), state, derived_share_);
  return symbolic.derived;
}

std::string Engine::capture_probes(const std::vector<c10::IValue>& args, const State& state,
                                   const Signature& signature, const std::vector<DynamicDim>& dims,
                                   const std::vector<int>& symbol_of, const capture::ProbeDesign& design,
                                   capture::Capture& base,
                                   std::vector<capture::Capture>& probes) const {
  // Probes run the forward on made-up inputs: only when that cannot change the module, the
  // caller's tensors or the random number stream (batch norm statistics in training mode,
  // dropout). Writes into tensors the forward made itself are its own business.
  if (int n = passes::first_visible_effect(passes::analyse_effects(base.graph)); n >= 0) {
    return fmt::format("the forward writes memory in place or draws random numbers ({}{}), which probing at other "
                       "sizes would repeat",
                       base.graph.nodes[n].qualified_name(), signature.training ? "; the module is in training mode" : "");
  }
  // Probes are laid out as the base capture was (compile_signature), so that their plans align.
  const bool inference = !needs_gradients(args, state);
  for (std::size_t k = 1; k < design.points.size(); ++k) {
    try {
      const auto probe_args = capture::probe_arguments(args, dims, symbol_of, design.points[k]);
      probes.push_back(capture::capture_forward(access_, probe_args, state));
      // Only the trace is wanted: the probe's result (up to the call's own size) goes before the
      // next probe runs (three held together were the sweep's peak on the H200).
      probes.back().result = c10::IValue();
      if (inference && probes.back().unsupported.empty()) {
        relayout_for_inference(probes.back().graph, call_tensors(probe_args, state));
      }
    } catch (const std::exception& error) {
      return fmt::format("the forward raised at probe sizes [{}]: {}", fmt::join(design.points[k], ", "),
                         message_of(error));
    }
    if (!probes.back().unsupported.empty()) {
      return fmt::format("at probe sizes [{}]: {}", fmt::join(design.points[k], ", "), probes.back().unsupported);
    }
    if (reads_pin_sizes(probes.back())) {
      return fmt::format("at probe sizes [{}] the forward reads values computed from sizes into C++ ({}), which "
                         "hold for those exact sizes",
                         fmt::join(design.points[k], ", "), probes.back().reads_from_sizes.front());
    }
  }
  std::vector<ir::Graph*> graphs{&base.graph};
  for (auto& probe : probes) graphs.push_back(&probe.graph);
  return capture::mark_size_dependent(graphs, design);
}

std::string Engine::fit_symbolic(const std::vector<DynamicDim>& dims, const std::vector<int>& symbol_of,
                                 const capture::ProbeDesign& design,
                                 const Signature& signature, const std::vector<int>& tensor_arguments,
                                 std::shared_ptr<const Plan> base, std::vector<capture::Capture> probes) {
  std::vector<std::shared_ptr<const Plan>> plans{std::move(base)};
  for (std::size_t k = 0; k < probes.size(); ++k) {
    CompileReport scratch;
    try {
      plans.push_back(optimize_and_lower(std::move(probes[k].graph), scratch, /*inference=*/true, fmt::format("probe {}", k + 1)));
    } catch (const Error& error) {
      return fmt::format("planning at probe sizes [{}] failed: {}", fmt::join(design.points[k + 1], ", "), error.what());
    }
    stats_.kernels_compiled += scratch.kernels_compiled;
  }
  auto fitted = capture::SymbolicPlan::fit(dims, symbol_of, design, signature, tensor_arguments, plans);
  if (auto* why = std::get_if<std::string>(&fitted)) return *why;
  symbolic_plans_.push_front(std::move(std::get<capture::SymbolicPlan>(fitted)));
  while (symbolic_plans_.size() > options_.symbolic_plan_limit) symbolic_plans_.pop_back();
  ++stats_.symbolic_plans;
  return "";
}

}  // namespace zenith::detail
