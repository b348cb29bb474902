#include "capture/engine.h"

#include <chrono>
#include <filesystem>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "capture/tracer_capture.h"
#include "core/dump.h"
#include "core/executor.h"
#include "core/log.h"
#include "core/plugin_loader.h"
#include "passes/lowering.h"
#include "passes/pass_manager.h"

namespace zenith::detail {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
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

}  // namespace

Engine::Engine(ModuleAccess access, CompileOptions options)
    : access_(std::move(access)), options_(std::move(options)), cache_(options_.plan_cache_size) {
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
  bool needs_grad = false;
  if (at::GradMode::is_enabled()) {
    for (const auto& arg : args) needs_grad = needs_grad || (arg.isTensor() && arg.toTensor().requires_grad());
    for (const auto& item : state) needs_grad = needs_grad || item.second.requires_grad();
  }
  if (needs_grad) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++stats_.eager_calls;
      if (!told_about_gradients_) {
        log::info("{}: this call needs gradients; it runs eagerly (training through Zenith is not supported yet). "
                  "Wrap inference in torch::NoGradGuard or c10::InferenceMode to compile it.",
                  options_.name);
        told_about_gradients_ = true;
      }
    }
    return run_eager(args);
  }
  auto signature = make_signature(args, tensors_of(state), access_.is_training ? access_.is_training() : false);
  std::shared_ptr<const Entry> entry;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    entry = cache_.find(signature);
    if (entry) {
      ++stats_.hits;
    } else {
      if (stats_.misses++ > 0) ++stats_.recaptures;
      auto compiled = compile_signature(args, state, signature);
      stats_.evictions += static_cast<std::int64_t>(cache_.insert(signature, compiled.entry));
      if (compiled.entry->plan == nullptr) ++stats_.eager_calls;
      return compiled.result;
    }
    if (entry->plan == nullptr) ++stats_.eager_calls;
  }
  if (entry->plan == nullptr) return run_eager(args);
  auto result = run_plan(*entry, args, state);
  verify_against_eager(args, result);
  return result;
}

Engine::Compiled Engine::compile_signature(const std::vector<c10::IValue>& args,
                                           const std::vector<std::pair<std::string, at::Tensor>>& state,
                                           const Signature& signature) {
  auto start = Clock::now();
  CompileReport report;
  report.signature = signature.to_string();
  report.plan_cache = stats_;
  report.plan_cache.size = cache_.size();
  report.plan_cache.capacity = cache_.capacity();
  if (last_signature_) {
    log::info("{}: new signature, recapturing: {}", options_.name, signature.describe_change(*last_signature_));
  } else {
    log::info("{}: first call, capturing {}", options_.name, report.signature);
  }
  capture::Capture capture;
  try {
    capture = capture::capture_forward(access_, args, state);
  } catch (const std::exception& error) {
    // LibTorch errors carry a C++ backtrace that buries the message; keep the message.
    const auto* torch_error = dynamic_cast<const c10::Error*>(&error);
    std::string what = torch_error ? torch_error->what_without_backtrace() : error.what();
    std::string context = last_signature_
                              ? fmt::format("expected a call like the last one that worked, {}; got {} ({})",
                                            last_signature_->to_string(), report.signature,
                                            signature.describe_change(*last_signature_))
                              : fmt::format("the call was {}", report.signature);
    throw Error(fmt::format("{}: forward raised while Zenith captured it: {}. {}. The compiled module is still usable.",
                            options_.name, what, context));
  }
  report.capture_ms = ms_since(start);
  auto entry = std::make_shared<Entry>();
  entry->tensor_args = capture.tensor_arg_positions.size();
  auto fall_back = [&](const std::string& reason) -> Compiled {
    if (!options_.fallback_to_eager) {
      throw Error(fmt::format("{}: cannot compile the call {}: {}. Set CompileOptions::fallback_to_eager to run such "
                              "calls eagerly.",
                              options_.name, report.signature, reason));
    }
    log::warn("{}: the call {} runs eagerly: {}", options_.name, report.signature, reason);
    report.eager_fallback = true;
    report.fallback_reason = reason;
    report.total_ms = ms_since(start);
    last_report_ = report;
    entry->eager_reason = reason;
    return Compiled{entry, capture.result};
  };
  if (!capture.unsupported.empty()) return fall_back(capture.unsupported);

  report.nodes_captured = static_cast<std::int64_t>(capture.graph.nodes.size());
  Dump dump;
  bool dumping = !options_.dump_dir.empty();
  if (dumping) dump.captured = capture.graph;
  std::shared_ptr<Plan> plan;
  try {
    auto passes_start = Clock::now();
    report.passes = passes::PassManager::default_pipeline(options_).run(capture.graph);
    report.passes_ms = ms_since(passes_start);
    report.nodes_final = static_cast<std::int64_t>(capture.graph.nodes.size());
    auto lowering_start = Clock::now();
    auto backend_options = nlohmann::json{{"dump_dir", options_.dump_dir}}.dump();
    plan = std::make_shared<Plan>(passes::lower_to_plan(std::move(capture.graph), backends_, report, backend_options));
    report.backend_ms = ms_since(lowering_start);
  } catch (const Error& error) {
    return fall_back(error.what());
  }
  report.total_ms = ms_since(start);
  if (dumping) {
    dump.module_name = options_.name;
    dump.signature = report.signature;
    dump.optimized = plan->graph;
    for (const auto& step : plan->steps) dump.steps.push_back(DumpStep{step.backend, step.nodes});
    report.dump_path =
        (std::filesystem::path(options_.dump_dir) / fmt::format("{}-{:016x}.json", options_.name, signature.hash)).string();
    dump.report = report;
    try {
      write_json_file(report.dump_path, dump_to_json(dump, options_.dump_constant_limit));
    } catch (const Error& error) {
      log::warn("{}: could not write the trace dump: {}", options_.name, error.what());
      report.dump_path.clear();
    }
  }
  log::info("{}", report.to_string());
  last_report_ = report;
  last_signature_ = signature;
  entry->plan = std::move(plan);
  return Compiled{entry, capture.result};
}

c10::IValue Engine::run_plan(const Entry& entry, const std::vector<c10::IValue>& args,
                             const std::vector<std::pair<std::string, at::Tensor>>& state) {
  std::vector<at::Tensor> inputs;
  inputs.reserve(entry.tensor_args + state.size());
  for (const auto& arg : args) {
    if (arg.isTensor()) inputs.push_back(arg.toTensor());
  }
  for (const auto& item : state) inputs.push_back(item.second);
  return execute(*entry.plan, inputs);
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
  stats.size = cache_.size();
  stats.capacity = cache_.capacity();
  return stats;
}

}  // namespace zenith::detail
