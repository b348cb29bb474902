// Compiling one signature: capture, the unseen-data check, probes for symbolic dimensions, passes
// and lowering (or a training plan), the report and the trace dump; eager with the reason when a
// step refuses.
#include "runtime/engine.h"

#include <filesystem>
#include <optional>

#include <ATen/autocast_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <fmt/format.h>

#include "capture/unseen_data.h"
#include "core/dump.h"
#include "core/exception_message.h"
#include "core/log.h"
#include "passes/lowering.h"
#include "passes/pass_manager.h"
#include "runtime/call_tensors.h"
#include "runtime/dynamic_dims.h"
#include "runtime/value_checks.h"
#include "core/elapsed.h"

namespace zenith::detail {

namespace {

// Inside an autocast region, autocast keeps the casts of weights it made earlier in the region and
// hands them out again: to a trace, tensors it never saw made. Off while the forward is captured
// (and run again), every cast is made, and traced, where the forward asks for it.
class AutocastCastCacheOff {
 public:
  AutocastCastCacheOff() : before_(at::autocast::is_autocast_cache_enabled()) {
    at::autocast::set_autocast_cache_enabled(false);
  }
  ~AutocastCastCacheOff() { at::autocast::set_autocast_cache_enabled(before_); }
  AutocastCastCacheOff(const AutocastCastCacheOff&) = delete;
  AutocastCastCacheOff& operator=(const AutocastCastCacheOff&) = delete;

 private:
  const bool before_;
};

}  // namespace

Engine::Compiled Engine::compile_signature(const std::vector<c10::IValue>& args, const State& state,
                                           const Signature& signature, std::vector<DynamicDim> dims) {
  auto start = Clock::now();
  std::optional<AutocastCastCacheOff> cast_cache_off;
  if (!signature.autocast.empty()) cast_cache_off.emplace();
  CompileReport report;
  report.signature = signature.to_string();
  capture::Capture capture;
  try {
    capture = capture::capture_forward(access_, args, state);
  } catch (const std::exception& error) {
    std::string what = message_of(error);
    std::string context = last_signature_
                              ? fmt::format("expected a call like the last one that worked, {}; got {} ({})",
                                            last_signature_->to_string(), report.signature,
                                            signature.describe_change(*last_signature_))
                              : fmt::format("the call was {}", report.signature);
    throw Error(fmt::format("{}: forward raised while Zenith captured it: {}. {}. The compiled module is still usable.",
                            options_.name, what, context));
  }
  // Before the unseen-data check, which runs the forward again: a forward whose effects rule out
  // value checks is not run twice.
  if (capture.unsupported.empty() && !capture.value_guards.empty()) {
    capture.unsupported = needs_gradients(args, state)
                              ? fmt::format("the forward reads its data into C++ ({}) and the call needs gradients: "
                                            "training plans have no value checks",
                                            capture.value_guards.front().op)
                              : value_check_refusal(capture);
  }
  if (capture.unsupported.empty()) capture.unsupported = capture::find_unseen_data(access_, args, state, capture);
  report.capture_ms = ms_since(start);
  if (capture.unsupported.empty()) {
    log::info("{}: capture: {} nodes in {:.1f} ms{}", options_.name, capture.graph.nodes.size(), report.capture_ms,
              capture.reads_from_sizes.empty()
                  ? std::string()
                  : fmt::format("; {} values computed from sizes alone were read at capture ({}...)",
                                capture.reads_from_sizes.size(), capture.reads_from_sizes.front()));
  }
  auto entry = std::make_shared<Entry>();
  auto finish_report = [&] {
    report.plan_cache = stats_;
    report.plan_cache.size = cache_.size();
    report.plan_cache.capacity = cache_.capacity();
    report.total_ms = ms_since(start);
    last_report_ = report;
  };
  auto fall_back = [&](const std::string& reason, bool warn = true) -> Compiled {
    if (!options_.fallback_to_eager) {
      throw Error(fmt::format("{}: cannot compile the call {}: {}. Set CompileOptions::fallback_to_eager to run such "
                              "calls eagerly.",
                              options_.name, report.signature, reason));
    }
    if (warn) log::warn("{}: the call {} runs eagerly: {}", options_.name, report.signature, reason);
    else log::info("{}: the call {} runs eagerly: {}", options_.name, report.signature, reason);
    report.eager_fallback = true;
    report.fallback_reason = reason;
    finish_report();
    entry->eager_reason = reason;
    return Compiled{entry, capture.result};
  };
  if (!capture.unsupported.empty()) return fall_back(capture.unsupported);
  if (!needs_gradients(args, state)) relayout_for_inference(capture.graph, call_tensors(args, state));

  // Probes are captured before the passes: they decide which nodes constant folding must leave.
  std::vector<capture::Capture> probes;
  capture::ProbeDesign design;
  std::vector<int> symbol_of;
  std::string static_reason;
  // A refusal of this call's sizes (a size of 1) may not hold for the next call: only refusals
  // from probing (the module's nature) are remembered.
  bool remember_refusal = false;
  auto probe_start = Clock::now();
  if (!dims.empty()) {
    static_reason = capture::check_dims(args, dims);
    if (static_reason.empty() && !capture.value_guards.empty()) {
      remember_refusal = true;
      static_reason = fmt::format("the forward reads {} values of its data into C++ ({}); the plan checks them and "
                                  "holds for these exact sizes",
                                  capture.value_guards.size(), capture.value_guards.front().op);
    }
    if (static_reason.empty() && reads_pin_sizes(capture)) {
      // Their values were read at this call's sizes and may have chosen which ops ran; no polynomial
      // stands behind such a choice. (In a straight-line forward they only become arguments.)
      remember_refusal = true;
      static_reason = fmt::format("the forward reads {} values computed from sizes into C++ ({}); they hold for "
                                  "these exact sizes",
                                  capture.reads_from_sizes.size(), capture.reads_from_sizes.front());
    }
    if (static_reason.empty()) {
      remember_refusal = true;
      symbol_of = capture::share_symbols(args, dims);
      std::vector<std::int64_t> base;
      for (std::size_t k = 0; k < dims.size(); ++k) {
        if (static_cast<std::size_t>(symbol_of[k]) == base.size()) base.push_back(args[dims[k].argument].toTensor().size(dims[k].dim));
      }
      design = capture::ProbeDesign::around(base);
      static_reason = capture_probes(args, state, signature, dims, symbol_of, design, capture, probes);
    }
  }
  double probe_ms = ms_since(probe_start);
  if (!dims.empty() && static_reason.empty()) {
    log::info("{}: probes: {} captures at other sizes in {:.1f} ms", options_.name, probes.size(), probe_ms);
  }

  // From here on, ops run on the captured graph (constant folding, the backward's capture, the
  // plans' first runs): the graph holds autocast's casts, which must not be made again.
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  report.nodes_captured = static_cast<std::int64_t>(capture.graph.nodes.size());
  Dump dump;
  bool dumping = !options_.dump_dir.empty();
  if (dumping) dump.captured = capture.graph;
  std::shared_ptr<const Plan> plan;
  try {
    if (needs_gradients(args, state)) {
      TrainingBuild build;
      try {
        build = plan_training(std::move(capture.graph), args, state, report);
      } catch (const Error&) {
        throw;
      } catch (const std::exception& error) {
        build.refusal = "differentiating the forward failed: " + message_of(error);
      }
      if (!build.refusal.empty()) {
        // One warning per op; other signatures with it say so at info level.
        const bool first_time = build.op.empty() || warned_ops_.insert(build.op).second;
        return fall_back("training: " + build.refusal + "; this signature runs eagerly, gradients included", first_time);
      }
      plan = build.plan;
      entry->training = build.training;
    } else {
      auto lowered = optimize_and_lower(std::move(capture.graph), report, /*inference=*/true);
      attach_value_checks(*lowered, capture);
      report.value_checks = describe_value_checks(*lowered);
      for (const auto& line : report.value_checks) {
        log::info("{}: graph break at a data read: {}; a call with another value runs eagerly", options_.name, line);
      }
      plan = std::move(lowered);
    }
  } catch (const Error& error) {
    return fall_back(error.what());
  }
  stats_.kernels_compiled += report.kernels_compiled;
  if (!dims.empty()) {
    probe_start = Clock::now();
    if (static_reason.empty()) {
      static_reason =
          fit_symbolic(dims, symbol_of, design, signature, capture.tensor_arg_positions, plan, std::move(probes));
    }
    probe_ms += ms_since(probe_start);
    report.probe_ms = probe_ms;
    if (static_reason.empty()) {
      report.symbolic = capture::describe_symbols(dims, symbol_of);
    } else {
      report.static_reason = fmt::format("{} cannot be symbolic: {}", capture::describe_dims(dims), static_reason);
      if (remember_refusal) refused_dims_.insert(capture::describe_dims(dims));
      log::info("{}: {}; new sizes of it are captured again", options_.name, report.static_reason);
    }
  }
  finish_report();
  if (dumping) {
    dump.module_name = options_.name;
    dump.signature = report.signature;
    dump.optimized = plan->graph;
    for (const auto& step : plan->steps) dump.steps.push_back(DumpStep{step.backend, step.nodes, step.declined});
    if (entry->training) {
      dump.backward = entry->training->backward->graph;
      for (const auto& step : entry->training->backward->steps) {
        dump.backward_steps.push_back(DumpStep{step.backend, step.nodes, step.declined});
      }
    }
    report.dump_path =
        (std::filesystem::path(options_.dump_dir) / fmt::format("{}-{:016x}.json", options_.name, signature.hash)).string();
    dump.report = report;
    try {
      write_json_file(report.dump_path, dump_to_json(dump, options_.dump_constant_limit));
    } catch (const Error& error) {
      log::warn("{}: could not write the trace dump: {}", options_.name, error.what());
      report.dump_path.clear();
    }
    last_report_ = report;
  }
  log::info("{}", report.to_string());
  last_signature_ = signature;
  // A symbolic plan's base entry shares its derived values with the instances to come.
  if (!entry->training && !symbolic_plans_.empty() && symbolic_plans_.front().base() == plan) {
    entry->derived = shared_derived_values(symbolic_plans_.front(), state.size());
  }
  entry->plan = std::move(plan);
  if (!entry->training) attach_inference_graph(*entry, state.size());
  return Compiled{entry, capture.result};
}

std::shared_ptr<Plan> Engine::optimize_and_lower(ir::Graph graph, CompileReport& report, bool inference,
                                                 const std::string& part) const {
  // One line per phase as it ends: a long compile shows where it is. Probes are many and alike.
  auto phase = [&](const std::string& text) {
    if (part.rfind("probe", 0) == 0) log::debug("{}: {}{}", options_.name, part + " ", text);
    else log::info("{}: {}{}", options_.name, part.empty() ? "" : part + " ", text);
  };
  auto passes_start = Clock::now();
  const auto captured = graph.nodes.size();
  report.passes = passes::PassManager::default_pipeline(options_, inference).run(graph);
  report.passes_ms = ms_since(passes_start);
  report.nodes_final = static_cast<std::int64_t>(graph.nodes.size());
  phase(fmt::format("passes: {} -> {} nodes in {:.1f} ms", captured, graph.nodes.size(), report.passes_ms));
  auto lowering_start = Clock::now();
  auto plan = std::make_shared<Plan>(passes::lower_to_plan(std::move(graph), backends_, report, backend_options_));
  report.backend_ms = ms_since(lowering_start);
  phase(fmt::format("backends: {} kernel launches, {} host views; {} kernels compiled, {} from a cache, in {:.1f} ms",
                    report.groups, report.host_nodes, report.kernels_compiled, report.kernel_cache_hits,
                    report.backend_ms));
  return plan;
}

}  // namespace zenith::detail
