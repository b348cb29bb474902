#include "runtime/engine.h"

#include <algorithm>
#include <chrono>
#include <filesystem>

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/grad_mode.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "capture/backward_capture.h"
#include "capture/unseen_data.h"
#include "runtime/dynamic_dims.h"
#include "runtime/training_function.h"
#include "capture/tracer_capture.h"
#include "core/dump.h"
#include "runtime/executor.h"
#include "core/log.h"
#include "core/plugin_loader.h"
#include "passes/autodiff/backward_graph.h"
#include "passes/autodiff/channels_last.h"
#include "passes/autodiff/training_rewrite.h"
#include "passes/effects.h"
#include "passes/lowering.h"
#include "passes/pass_manager.h"

namespace zenith::detail {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// The tensors a plan binds: the call's tensor arguments, then the parameters and buffers.
std::vector<at::Tensor> call_tensors(const std::vector<c10::IValue>& args,
                                     const std::vector<std::pair<std::string, at::Tensor>>& state) {
  std::vector<at::Tensor> inputs;
  inputs.reserve(args.size() + state.size());
  for (const auto& arg : args) {
    if (arg.isTensor()) inputs.push_back(arg.toTensor());
  }
  for (const auto& item : state) inputs.push_back(item.second);
  return inputs;
}

std::vector<at::Tensor> tensors_of(const std::vector<std::pair<std::string, at::Tensor>>& state) {
  std::vector<at::Tensor> tensors;
  tensors.reserve(state.size());
  for (const auto& item : state) tensors.push_back(item.second);
  return tensors;
}

void flatten(const c10::IValue& value, std::vector<at::Tensor>& out) {
  if (value.isTensor()) out.push_back(value.toTensor());
  else if (value.isTuple()) for (const auto& element : value.toTupleRef().elements()) flatten(element, out);
  else if (value.isTensorList()) for (const auto& tensor : value.toTensorVector()) out.push_back(tensor);
  else if (value.isList()) for (const auto& element : value.toListRef()) flatten(element, out);
}

// LibTorch errors carry a C++ backtrace that buries the message; keep the message.
std::string message_of(const std::exception& error) {
  const auto* torch_error = dynamic_cast<const c10::Error*>(&error);
  return torch_error ? torch_error->what_without_backtrace() : error.what();
}

// The autocast regions enabled on this thread, e.g. "cuda:bfloat16" (empty: none).
std::string autocast_regions() {
  std::string regions;
  for (auto device : {at::kCPU, at::kCUDA}) {
    if (!at::autocast::is_autocast_enabled(device)) continue;
    regions += fmt::format("{}{}:{}", regions.empty() ? "" : ",", c10::DeviceTypeName(device, /*lower_case=*/true),
                           ir::dtype_name(at::autocast::get_autocast_dtype(device)));
  }
  return regions;
}

}  // namespace

Engine::Engine(ModuleAccess access, CompileOptions options)
    : access_(std::move(access)),
      options_(std::move(options)),
      backend_options_(nlohmann::json{{"dump_dir", options_.dump_dir}}.dump()),
      cache_(options_.plan_cache_size) {
  if (!options_.disable) backends_ = order_backends(discover_backends(options_.plugin_paths), options_.backends);
  std::string names;
  for (const auto* backend : backends_) names += (names.empty() ? "" : ", ") + backend->name();
  log::debug("{}: backends in priority order: {}", options_.name, names.empty() ? "none" : names);
}

void Engine::check_arguments(const std::vector<c10::IValue>& args) const {
  if (access_.arity >= 0 && static_cast<int>(args.size()) != access_.arity) {
    throw Error::mismatch(options_.name + ": number of forward arguments", std::to_string(access_.arity),
                          std::to_string(args.size()));
  }
}

c10::IValue Engine::call(std::vector<c10::IValue> args) {
  check_arguments(args);
  if (options_.disable) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.eager_calls;
    return run_eager(args);
  }
  auto state = access_.state ? access_.state() : std::vector<std::pair<std::string, at::Tensor>>{};
  const bool training = needs_gradients(args, state);
  if (auto why = eager_reason(training); !why.empty()) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++stats_.eager_calls;
      if (told_eager_.insert(why).second) log::info("{}: {}; such calls run eagerly", options_.name, why);
    }
    return run_eager(args);
  }
  auto signature = make_signature(args, tensors_of(state), access_.is_training ? access_.is_training() : false);
  std::shared_ptr<const Entry> entry;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    entry = cache_.find(signature);
    std::string refusal;
    if (entry) {
      ++stats_.hits;
    } else if (auto started = Clock::now(); !training && (entry = instantiate_symbolic(signature, refusal))) {
      ++stats_.instantiations;
      stats_.instantiation_ms += ms_since(started);
      stats_.evictions += static_cast<std::int64_t>(cache_.insert(signature, entry));
    } else {
      if (stats_.misses++ > 0) ++stats_.recaptures;
      if (last_signature_) {
        log::info("{}: new signature, recapturing: {}{}", options_.name, signature.describe_change(*last_signature_),
                  refusal.empty() ? "" : "; no symbolic plan serves it: " + refusal);
      } else {
        log::info("{}: first call, capturing {}", options_.name, signature.to_string());
      }
      // Training signatures stay static: probing would run the forward's effects (batch norm
      // statistics, dropout's random numbers) again.
      auto compiled = compile_signature(args, state, signature, training ? std::vector<DynamicDim>{} : dims_to_make_symbolic(signature));
      stats_.evictions += static_cast<std::int64_t>(cache_.insert(signature, compiled.entry));
      if (compiled.entry->plan == nullptr) ++stats_.eager_calls;
      return compiled.result;
    }
    if (entry->plan == nullptr) ++stats_.eager_calls;
    if (entry->training) ++stats_.training_calls;
  }
  if (entry->plan == nullptr) return run_eager(args);
  if (entry->training) return capture::run_training_call(entry->training, call_tensors(args, state));
  auto result = run_plan(*entry, args, state);
  verify_against_eager(args, result);
  return result;
}

std::vector<DynamicDim> Engine::dims_to_make_symbolic(const Signature& signature) const {
  if (options_.dynamic_shapes == DynamicShapes::Off) return {};
  auto dims = options_.dynamic_dims;
  if (last_signature_) dims = capture::merge_dims(dims, capture::changed_dims(*last_signature_, signature));
  if (dims.empty() || refused_dims_.count(capture::describe_dims(dims))) return {};
  return dims;
}

std::shared_ptr<const Engine::Entry> Engine::instantiate_symbolic(const Signature& signature, std::string& refusal) {
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
    return entry;
  }
  return nullptr;
}

std::shared_ptr<Plan> Engine::optimize_and_lower(ir::Graph graph, CompileReport& report) const {
  auto passes_start = Clock::now();
  report.passes = passes::PassManager::default_pipeline(options_).run(graph);
  report.passes_ms = ms_since(passes_start);
  report.nodes_final = static_cast<std::int64_t>(graph.nodes.size());
  auto lowering_start = Clock::now();
  auto plan = std::make_shared<Plan>(passes::lower_to_plan(std::move(graph), backends_, report, backend_options_));
  report.backend_ms = ms_since(lowering_start);
  return plan;
}

std::string Engine::capture_probes(const std::vector<c10::IValue>& args, const State& state,
                                   const Signature& signature, const std::vector<DynamicDim>& dims,
                                   const std::vector<int>& symbol_of, const capture::ProbeDesign& design,
                                   capture::Capture& base,
                                   std::vector<capture::Capture>& probes) const {
  // Probes run the forward on made-up inputs: only when that cannot change the module or the
  // random number stream (batch norm statistics in training mode, dropout).
  auto effects = passes::analyse_effects(base.graph);
  for (std::size_t n = 0; n < base.graph.nodes.size(); ++n) {
    if (effects.node_has_effect[n]) {
      return fmt::format("the forward writes memory in place or draws random numbers ({}{}), which probing at other "
                         "sizes would repeat",
                         base.graph.nodes[n].qualified_name(), signature.training ? "; the module is in training mode" : "");
    }
  }
  for (std::size_t k = 1; k < design.points.size(); ++k) {
    try {
      probes.push_back(capture::capture_forward(access_, capture::probe_arguments(args, dims, symbol_of, design.points[k]), state));
    } catch (const std::exception& error) {
      return fmt::format("the forward raised at probe sizes [{}]: {}", fmt::join(design.points[k], ", "),
                         message_of(error));
    }
    if (!probes.back().unsupported.empty()) {
      return fmt::format("at probe sizes [{}]: {}", fmt::join(design.points[k], ", "), probes.back().unsupported);
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
      plans.push_back(optimize_and_lower(std::move(probes[k].graph), scratch));
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

Engine::Compiled Engine::compile_signature(const std::vector<c10::IValue>& args, const State& state,
                                           const Signature& signature, std::vector<DynamicDim> dims) {
  auto start = Clock::now();
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
  if (capture.unsupported.empty()) capture.unsupported = capture::find_unseen_data(access_, args, state, capture);
  report.capture_ms = ms_since(start);
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
      plan = optimize_and_lower(std::move(capture.graph), report);
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
    for (const auto& step : plan->steps) dump.steps.push_back(DumpStep{step.backend, step.nodes});
    if (entry->training) {
      dump.backward = entry->training->backward->graph;
      for (const auto& step : entry->training->backward->steps) {
        dump.backward_steps.push_back(DumpStep{step.backend, step.nodes});
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
  entry->plan = std::move(plan);
  return Compiled{entry, capture.result};
}

c10::IValue Engine::run_plan(const Entry& entry, const std::vector<c10::IValue>& args,
                             const std::vector<std::pair<std::string, at::Tensor>>& state) {
  return execute(*entry.plan, call_tensors(args, state));
}

std::string Engine::eager_reason(bool training) const {
  if (training && !options_.compile_training) return "this call needs gradients and CompileOptions::compile_training is off";
  // A trace under autocast does not replay faithfully: autocast's casts of cached weights and its
  // per-op dtype choices are not all in the trace.
  if (auto regions = autocast_regions(); !regions.empty()) {
    return fmt::format("this call runs in an autocast region ({}), which Zenith does not compile", regions);
  }
  return "";
}

bool Engine::needs_gradients(const std::vector<c10::IValue>& args, const State& state) {
  if (!at::GradMode::is_enabled()) return false;
  for (const auto& arg : args) {
    if (arg.isTensor() && arg.toTensor().requires_grad()) return true;
  }
  for (const auto& item : state) {
    if (item.second.requires_grad()) return true;
  }
  return false;
}

Engine::TrainingBuild Engine::plan_training(ir::Graph graph, const std::vector<c10::IValue>& args, const State& state,
                                            CompileReport& report) {
  auto start = Clock::now();
  auto inputs = call_tensors(args, state);
  std::vector<bool> requires_grad;
  for (const auto& tensor : inputs) requires_grad.push_back(tensor.requires_grad());
  const bool relaid = options_.channels_last && autodiff::convolutions_channels_last(graph);
  auto provisional = autodiff::rewrite_for_training(graph);
  auto values = capture::forward_values(graph, inputs);
  for (int id : provisional) {
    auto type = type_of(values.at(id));
    type.requires_grad = false;
    graph.value(id).type = type;
  }
  // Channels-last copies changed the layout of what follows them; the run says what it became.
  if (relaid) {
    for (std::size_t id = 0; id < values.size(); ++id) {
      if (values[id].defined() && graph.values[id]) graph.values[id]->type.strides = values[id].strides().vec();
    }
  }
  auto captured = capture::capture_backward(graph, values, requires_grad);
  values.clear();
  TrainingBuild build;
  if (!captured.unsupported.empty()) {
    build.refusal = captured.unsupported;
    build.op = captured.op;
    return build;
  }
  auto& backward = captured.backward;
  if (backward.graph.outputs.empty()) {
    build.plan = optimize_and_lower(std::move(graph), report);
    return build;
  }
  autodiff::rematerialize(graph, backward);
  auto training = std::make_shared<TrainingPlan>();
  training->call_outputs = graph.outputs.size();
  training->output_structure = graph.output_structure;
  training->differentiable = captured.differentiable;
  training->output_gradients = backward.output_gradients;
  training->input_gradients = backward.input_gradients;
  training->inputs = inputs.size();
  report.backward.saved_values = static_cast<std::int64_t>(backward.saved.size());
  report.backward.recomputed_values = backward.recomputed;
  graph.outputs.insert(graph.outputs.end(), backward.saved.begin(), backward.saved.end());
  double autodiff_ms = ms_since(start);
  training->forward = optimize_and_lower(std::move(graph), report);
  auto backward_start = Clock::now();
  CompileReport backward_report;
  auto backward_plan = optimize_and_lower(std::move(backward.graph), backward_report);
  const auto saved_count = backward.saved.size();
  for (std::size_t k = 0; k < training->output_gradients.size(); ++k) {
    training->gradient_types.push_back(backward_plan->graph.value(backward_plan->graph.inputs[saved_count + k]).type);
  }
  training->backward = std::move(backward_plan);
  if (options_.cuda_graphs) attach_graphs(*training, inputs.size() - state.size(), saved_count);
  report.backward.compiled = true;
  report.backward.nodes = backward_report.nodes_final;
  report.backward.groups = backward_report.groups;
  report.kernels_compiled += backward_report.kernels_compiled;
  report.kernel_cache_hits += backward_report.kernel_cache_hits;
  report.backward.ms = autodiff_ms + ms_since(backward_start);
  build.plan = training->forward;
  build.training = std::move(training);
  return build;
}

void Engine::attach_graphs(TrainingPlan& training, std::size_t arguments, std::size_t saved) const {
  const auto& steps = training.forward->steps;
  if (std::none_of(steps.begin(), steps.end(), [](const Step& step) { return step.device.is_cuda(); })) return;
  // The forward reads parameters and buffers where they lie; arguments are copied in.
  std::vector<bool> forward_by_address(training.inputs, false);
  std::fill(forward_by_address.begin() + static_cast<std::ptrdiff_t>(arguments), forward_by_address.end(), true);
  std::string why;
  training.forward_graph = make_plan_graph(training.forward, std::move(forward_by_address), training.call_outputs,
                                           "the training forward of " + options_.name, graph_counters_, why);
  if (!training.forward_graph) log::info("{}: the training forward is not replayed as a CUDA graph: {}", options_.name, why);
  // The saved values stay where a graphed forward wrote them; incoming gradients are copied in.
  std::vector<bool> backward_by_address(training.backward->graph.inputs.size(), false);
  if (training.forward_graph) {
    std::fill(backward_by_address.begin(), backward_by_address.begin() + static_cast<std::ptrdiff_t>(saved), true);
  }
  training.backward_graph = make_plan_graph(training.backward, std::move(backward_by_address), 0,
                                            "the training backward of " + options_.name, graph_counters_, why);
  if (!training.backward_graph) log::info("{}: the training backward is not replayed as a CUDA graph: {}", options_.name, why);
}

c10::IValue Engine::run_eager(const std::vector<c10::IValue>& args) { return access_.forward(args); }

void Engine::verify_against_eager(const std::vector<c10::IValue>& args, const c10::IValue& compiled) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (verified_ >= options_.verify_calls) return;
    ++verified_;
  }
  auto eager = run_eager(args);
  std::vector<at::Tensor> got, want;
  flatten(compiled, got);
  flatten(eager, want);
  if (got.size() != want.size()) {
    throw Error::mismatch(options_.name + ": verify: number of outputs", std::to_string(want.size()) + " (eager)",
                          std::to_string(got.size()));
  }
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i].sizes() != want[i].sizes() || got[i].scalar_type() != want[i].scalar_type()) {
      throw Error::mismatch(fmt::format("{}: verify: output {}", options_.name, i),
                            fmt::format("{} {} (eager)", c10::toString(want[i].scalar_type()), c10::str(want[i].sizes())),
                            fmt::format("{} {}", c10::toString(got[i].scalar_type()), c10::str(got[i].sizes())));
    }
    if (got[i].numel() == 0) continue;
    auto a = got[i].to(at::kDouble), b = want[i].to(at::kDouble);
    auto excess = ((a - b).abs() - (options_.verify_atol + options_.verify_rtol * b.abs())).max().item<double>();
    if (excess > 0 || std::isnan(excess)) {
      double worst = (a - b).abs().max().item<double>();
      throw Error(fmt::format("{}: verify: output {} differs from eager by up to {:.3g} (tolerance atol {} + rtol {} * "
                              "|eager|). Report this with the trace dump (ZENITH_DUMP_DIR), or set ZENITH_BACKENDS "
                              "to find the backend at fault.",
                              options_.name, i, worst, options_.verify_atol, options_.verify_rtol));
    }
  }
}

CompileReport Engine::last_report() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return last_report_;
}

CacheStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  CacheStats stats = stats_;
  stats.graph_captures = graph_counters_->captures;
  stats.graph_replays = graph_counters_->replays;
  stats.graph_plain_runs = graph_counters_->plain_runs;
  stats.graph_failures = graph_counters_->failures;
  stats.size = cache_.size();
  stats.capacity = cache_.capacity();
  return stats;
}

}  // namespace zenith::detail
