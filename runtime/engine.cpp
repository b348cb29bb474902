// The call path: a call's signature, then the plan cache (a hit), a symbolic plan, or a capture
// (a miss); eager when Zenith cannot serve it. Compiling a signature, fitting symbolic plans,
// training plans and verification are in files of their own (engine.h lists them).
#include "runtime/engine.h"

#include <map>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/exception_message.h"
#include "core/log.h"
#include "core/plugin_loader.h"
#include "runtime/call_tensors.h"
#include "core/elapsed.h"
#include "runtime/executor.h"
#include "runtime/out_of_memory.h"
#include "runtime/training_function.h"

namespace zenith::detail {
namespace {

std::vector<at::Tensor> tensors_of(const std::vector<std::pair<std::string, at::Tensor>>& state) {
  std::vector<at::Tensor> tensors;
  tensors.reserve(state.size());
  for (const auto& item : state) tensors.push_back(item.second);
  return tensors;
}

// Counts a call from its start to its end: parameters are packed only while the one call that
// packs them is in flight (Engine::pack_parameters).
class CallInFlight {
 public:
  explicit CallInFlight(std::atomic<int>& count) : count_(count) { ++count_; }
  ~CallInFlight() { --count_; }
  CallInFlight(const CallInFlight&) = delete;
  CallInFlight& operator=(const CallInFlight&) = delete;

 private:
  std::atomic<int>& count_;
};

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

std::shared_ptr<const Engine::StateSnapshot> Engine::current_state(std::shared_ptr<const Hit>& last_hit) {
  std::lock_guard<std::mutex> lock(mutex_);
  last_hit = last_hit_;  // read under the same lock: one lock less a call
  // set_data or resize_ in place keeps a tensor and changes its layout: the slots' identities
  // alone do not tell. requires_grad only in grad mode: without it every call is an inference
  // call whatever the parameters require, and a snapshot kept with a stale requires_grad is read
  // anew at the first call in grad mode.
  if (state_ && access_.state_unchanged && access_.state_unchanged() &&
      state_->layout.holds(state_->state, /*with_requires_grad=*/at::GradMode::is_enabled())) {
    return state_;
  }
  auto snapshot = std::make_shared<StateSnapshot>();
  if (access_.state) snapshot->state = access_.state();
  const auto tensors = tensors_of(snapshot->state);
  snapshot->layout = StateLayout(snapshot->state);
  snapshot->fingerprint = state_fingerprint(tensors);
  snapshot->generation = ++snapshots_;
  call_buffers_.retire_before(snapshot->generation);
  state_ = snapshot;
  return state_;
}

c10::IValue Engine::call(std::vector<c10::IValue> args) {
  const CallInFlight in_flight(calls_in_flight_);
  check_arguments(args);
  if (options_.disable) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.eager_calls;
    return run_eager(args);
  }
  std::shared_ptr<const Hit> last_hit;
  const auto snapshot = current_state(last_hit);
  const State& state = snapshot->state;
  const bool training = needs_gradients(args, state);
  if (auto why = eager_reason(training); !why.empty()) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++stats_.eager_calls;
      if (told_eager_.insert(why).second) log::info("{}: {}; such calls run eagerly", options_.name, why);
    }
    return run_eager(args);
  }
  const bool module_training = access_.is_training ? access_.is_training() : false;
  const auto hit = last_hit && has_signature(last_hit->signature, args, snapshot->fingerprint, module_training)
                       ? last_hit
                       : nullptr;
  Signature built;
  if (!hit) built = make_signature(args, snapshot->fingerprint, module_training);
  const Signature& signature = hit ? hit->signature : built;
  std::shared_ptr<const Entry> entry;
  bool eager = false;  // decided once: the count and the path agree
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // The last hit still the last (no other call found or inserted an entry since current_state
    // read it): it is the most recently used entry, and still in the cache. Otherwise the lookup,
    // so that counts and order of use are the ones a lookup at every call gives.
    const bool still_last = hit && hit == last_hit_;
    entry = still_last ? hit->entry : cache_.find(signature);
    std::string refusal;
    if (entry) {
      ++stats_.hits;
      // A lookup made this entry the most recently used: it is the last hit now. A signature with a
      // non-tensor argument is not kept (has_signature never matches it), nor is the hit before.
      if (!still_last) {
        last_hit_ = signature_is_repeatable(signature) ? std::make_shared<const Hit>(Hit{signature, entry}) : nullptr;
      }
      pack_parameters(nullptr, state);
    } else if (auto started = Clock::now(); !training && (entry = instantiate_symbolic(signature, state.size(), refusal))) {
      ++stats_.instantiations;
      stats_.instantiation_ms += ms_since(started);
      stats_.evictions += static_cast<std::int64_t>(cache_.insert(signature, entry));
      last_hit_.reset();
      pack_parameters(entry, state);
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
      last_hit_.reset();
      if (compiled.entry->plan == nullptr) ++stats_.eager_calls;
      pack_parameters(compiled.entry, state);
      return compiled.result;
    }
    eager = entry->plan == nullptr || gave_up_checking(*entry);
    if (eager) ++stats_.eager_calls;
    if (entry->training) ++stats_.training_calls;
  }
  if (eager) return run_eager(args);
  if (entry->training) {
    if (!options_.profile_dir.empty() && !told_training_profile_.exchange(true)) {
      log::info("{}: training calls are not profiled (CompileOptions::profile_dir profiles inference plans)",
                options_.name);
    }
    try {
      return capture::run_training_call(entry->training, call_tensors(args, state));
    } catch (const std::exception& error) {
      if (!is_out_of_memory(error)) throw;
      return after_out_of_memory(error, signature, args, /*training=*/true);
    }
  }
  auto result = run_plan(*entry, signature, args, *snapshot);
  verify_against_eager(args, result);
  return result;
}

c10::IValue Engine::run_plan(const Entry& entry, const Signature& signature, const std::vector<c10::IValue>& args,
                             const StateSnapshot& snapshot) {
  const State& state = snapshot.state;
  try {
    auto profile = reserve_profile_run(signature);
    c10::IValue result;
    if (!profile && entry.graph) {
      const auto tensors = call_buffers_.lease(args, state, snapshot.generation);
      result = nest_outputs(entry.plan->graph.output_structure, entry.graph->run(tensors.tensors()));
    } else if (!profile) {
      result = execute(*entry.plan, call_tensors(args, state), nullptr, entry.derived.get());
    } else {  // profiled runs time each step, derived ones included: launch by launch
      StepTimer timer(profile->origin());
      result = execute(*entry.plan, call_tensors(args, state), &timer);
      record_profile_run(*profile, *entry.plan, signature, timer);
    }
    if (!entry.plan->value_checks.empty()) entry.value_check_failures_in_a_row = 0;
    return result;
  } catch (const ValueCheckFailed& failed) {
    // The plan stopped before anything the caller sees was written (value_checks.h).
    if (!options_.fallback_to_eager) {
      throw Error(fmt::format("{}: cannot run the call {} compiled: {}; its plan holds for the value read at capture "
                              "only. Set CompileOptions::fallback_to_eager to run such calls eagerly. The compiled "
                              "module is still usable.",
                              options_.name, signature.to_string(), failed.what()));
    }
    const int in_a_row = ++entry.value_check_failures_in_a_row;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++stats_.value_check_failures;
      ++stats_.eager_calls;
      const std::string why =
          fmt::format("a value the forward read into C++ ({}) differed from the one read at capture", failed.op());
      if (told_eager_.insert(why).second) log::info("{}: {}; such calls run eagerly", options_.name, why);
      if (in_a_row == kValueCheckFailuresToGiveUp) {
        log::info("{}: {}: the value {} reads changed {} calls in a row; this signature runs eagerly from now on",
                  options_.name, signature.to_string(), failed.op(), in_a_row);
      }
    }
    return run_eager(args);
  } catch (const std::exception& error) {
    if (!is_out_of_memory(error)) throw;
    return after_out_of_memory(error, signature, args, /*training=*/false);
  }
}

c10::IValue Engine::after_out_of_memory(const std::exception& error, const Signature& signature,
                                        const std::vector<c10::IValue>& args, bool training) {
  // The plan's values went with the exception: what it allocated before the failure is free again.
  // A training call never runs eagerly after it: its plan may have updated batch-norm statistics.
  const bool eagerly = options_.eager_on_out_of_memory && !training;
  const std::string what = message_of(error);
  const std::string first_line = what.substr(0, what.find('\n'));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.out_of_memory;
    if (eagerly) {
      ++stats_.eager_calls;
      if (told_eager_.insert("out of memory").second) {
        log::warn("{}: the plan of {} ran out of memory ({}); such calls run eagerly "
                  "(CompileOptions::eager_on_out_of_memory)",
                  options_.name, signature.to_string(), first_line);
      }
    }
  }
  if (eagerly) return run_eager(args);
  const std::string what_to_do =
      training ? "free memory (a smaller batch, fewer tensors kept)"
               : "free memory (smaller inputs, fewer results kept), or set CompileOptions::eager_on_out_of_memory "
                 "to run such calls eagerly";
  throw Error(fmt::format("{}: the {}call {} ran out of memory while its plan ran: {}. Nothing of this call was "
                          "returned and the compiled module is still usable: {}.",
                          options_.name, training ? "training " : "", signature.to_string(), first_line, what_to_do));
}

bool Engine::gave_up_checking(const Entry& entry) {
  return entry.value_check_failures_in_a_row.load() >= kValueCheckFailuresToGiveUp;
}

c10::IValue Engine::run_eager(const std::vector<c10::IValue>& args) { return access_.forward(args); }

std::string Engine::eager_reason(bool training) const {
  if (training && !options_.compile_training) return "this call needs gradients and CompileOptions::compile_training is off";
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

CompileReport Engine::last_report() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return last_report_;
}

std::int64_t Engine::kept_bytes() const {
  std::map<const void*, std::int64_t> bytes_by_storage;
  derived_share_->count_own_memory(bytes_by_storage);
  cache_.for_each([&](const Entry& entry) {
    if (entry.derived) entry.derived->count_own_memory(bytes_by_storage);
  });
  for (const auto& symbolic : symbolic_plans_) {
    if (symbolic.derived) symbolic.derived->count_own_memory(bytes_by_storage);
  }
  std::int64_t bytes = 0;
  for (const auto& [storage, size] : bytes_by_storage) bytes += size;
  return bytes;
}

CacheStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  CacheStats stats = stats_;
  stats.graph_captures = graph_counters_->captures;
  stats.graph_replays = graph_counters_->replays;
  stats.graph_plain_runs = graph_counters_->plain_runs;
  stats.graph_failures = graph_counters_->failures;
  stats.derived_computations = derived_share_->computations;
  stats.kept_bytes = kept_bytes();
  stats.size = cache_.size();
  stats.capacity = cache_.capacity();
  return stats;
}

}  // namespace zenith::detail
