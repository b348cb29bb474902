// The dynamic-shape test: every step brings a new sequence length, drawn once (by prepare.py, or
// here in a smoke run) so that every mode sees the same lengths in the same order. No mode is
// warmed up before the sweep: how a mode meets new shapes is what this measures. Each step is
// timed on the wall clock with the device synchronized, so recaptures and recompiles show up.
#include <torch/torch.h>

#include "accuracy.h"
#include "case_files.h"
#include "fixed_shape.h"
#include "fresh_cache_folder.h"
#include "line_fit.h"
#include "linear_relu.h"
#include "memory_trace.h"
#include "similar_lengths.h"
#include "timing.h"
#include "workloads.h"

namespace zenith::bench {

namespace {

struct Sweep {
  std::vector<std::int64_t> lengths;
  std::int64_t warmup = 0;
  std::function<at::Tensor(std::int64_t)> input_at;  // [batch, length, features], contiguous
  std::vector<std::size_t> checked_steps;             // the last three
  Tensors expected;                                   // eager outputs at the checked steps
  c10::ScalarType dtype = c10::ScalarType::Float;
};

std::int64_t counter(const nlohmann::json& info, const char* key) {
  return info.is_object() && info.contains(key) ? info.at(key).get<std::int64_t>() : 0;
}

void summarize_steps(const Sweep& sweep, const std::vector<double>& ms, const std::vector<double>& host, Result& r) {
  std::vector<double> later_ms, later_lengths;
  nlohmann::json per_step = nlohmann::json::array();
  for (std::size_t i = 0; i < ms.size(); ++i) {
    per_step.push_back({sweep.lengths[i], ms[i]});
    if (static_cast<std::int64_t>(i) < sweep.warmup) continue;
    later_ms.push_back(ms[i]);
    later_lengths.push_back(static_cast<double>(sweep.lengths[i]));
  }
  const auto samples = summarize(later_ms);
  const auto fit = fit_line(later_lengths, later_ms);
  r.first_call_ms = ms.front();
  r.median_ms = samples.median_ms;
  r.p90_ms = samples.p90_ms;
  r.reps = samples.reps;
  r.extra["worst_ms_after_warmup"] = samples.max_ms;
  r.extra["slope_ms_per_token"] = fit.slope;
  r.extra["r2"] = fit.r2;
  const auto slowest = slowest_against_similar_lengths(later_lengths, later_ms);
  r.extra["worst_over_similar_lengths"] = slowest.ratio;
  if (!later_ms.empty()) r.extra["worst_over_similar_lengths_at"] = later_lengths[slowest.index];
  r.extra["warmup_steps"] = sweep.warmup;
  r.extra["per_step"] = per_step;
  // Where a step's time went when it was slow: the host (a stall before the launches) or the device.
  r.extra["per_step_host_ms"] = host;
}

Result sweep_mode(const Context& context, const CaseSpec& spec, const ModeMaker& maker, const Sweep& sweep) {
  Result r = named_result(spec, maker.name);
  const PeakMemory memory(context.device);
  Mode mode;
  r.setup_ms = wall_ms(context.device, [&] { mode = maker.make(); });
  mode.call = traced_calls(std::move(mode.call), context.device, spec.name + " " + maker.name,
                           context.memory_trace_calls, context.memory_history);
  std::vector<double> ms, host;
  Tensors checked;
  nlohmann::json info_at_warmup;
  std::int64_t files_at_warmup = 0;
  for (std::size_t i = 0; i < sweep.lengths.size(); ++i) {
    if (static_cast<std::int64_t>(i) == sweep.warmup) {
      info_at_warmup = mode.info ? mode.info() : nlohmann::json();
      files_at_warmup = kernel_files(context.kernel_cache_dir);
    }
    const auto x = sweep.input_at(sweep.lengths[i]);
    ms.push_back(wall_ms(context.device, [&] { host.push_back(host_ms([&] { mode.call({x}); })); }));
  }
  memory.record(r);
  summarize_steps(sweep, ms, host, r);
  // The last lengths called again: a second call at a length is served by what the first one
  // built (Zenith's first call of a signature returns the trace's own eager result).
  for (auto step : sweep.checked_steps) checked.push_back(mode.call({sweep.input_at(sweep.lengths[step])}).at(0));
  r.max_rel_error = check_close(checked, sweep.expected, sweep.dtype, maker.name + " against eager, last three lengths again");
  if (mode.info) {
    const auto info = mode.info();
    r.extra["plan"] = info;
    r.extra["recaptures_after_warmup"] = counter(info, "recaptures") - counter(info_at_warmup, "recaptures");
    r.extra["nvrtc_compiles_after_warmup"] = kernel_files(context.kernel_cache_dir) - files_at_warmup;
  }
  return r;
}

}  // namespace

std::vector<Result> run_sweep(const Context& context, const CaseSpec& spec) {
  const std::int64_t batch = spec.integer("batch"), features = spec.integer("features");
  const std::int64_t min_seq = spec.integer("min_seq"), max_seq = spec.integer("max_seq");
  const std::int64_t steps = spec.integer("steps");
  CaseFiles files(context, spec);
  LinearRelu model(features);
  model->eval();
  files.load_weights(*model);
  model->to(context.device, spec.dtype());

  Sweep sweep;
  sweep.dtype = spec.dtype();
  sweep.warmup = spec.integer("warmup_steps");
  const auto lengths = files.input("lengths", [&] { return torch::randint(min_seq, max_seq + 1, {steps}, torch::kLong); });
  const auto host_lengths = lengths.to(torch::kCPU, torch::kLong).contiguous();
  sweep.lengths = std::vector<std::int64_t>(host_lengths.data_ptr<std::int64_t>(),
                                            host_lengths.data_ptr<std::int64_t>() + host_lengths.numel());
  // One buffer for every step: a step's input is its first batch * length * features elements,
  // viewed contiguously, so no step pays for making its input.
  const auto buffer = files.input("x", [&] {
    return torch::randn({batch * max_seq * features}, torch::TensorOptions().dtype(spec.dtype()));
  });
  sweep.input_at = [=](std::int64_t length) { return buffer.narrow(0, 0, batch * length * features).view({batch, length, features}); };
  const std::size_t n = sweep.lengths.size();
  if (n < 3) throw std::runtime_error("the sweep needs at least 3 steps");
  sweep.checked_steps = {n - 3, n - 2, n - 1};

  const Call eager = call_with<1>([model](at::Tensor x) mutable { return model->forward(x); });
  std::vector<Result> results;
  Result eager_result = named_result(spec, "eager");
  try {
    c10::InferenceMode inference;
    for (auto step : sweep.checked_steps) sweep.expected.push_back(eager({sweep.input_at(sweep.lengths[step])}).at(0));
    eager_result = sweep_mode(context, spec, {"eager", [&] { return Mode{eager, nullptr}; }}, sweep);
    if (files.present()) {
      const Tensors python = {files.python_output("check0"), files.python_output("check1"), files.python_output("check2")};
      eager_result.extra["python_eager_rel_error"] = check_close(sweep.expected, python, sweep.dtype, "C++ eager against Python eager");
    }
  } catch (const std::exception& error) {
    eager_result.fail(error_message(error));
  }
  results.push_back(eager_result);
  torch::NoGradGuard no_grad;
  for (const auto& maker : standard_modes(context, files, [&spec, model] {
         auto fast = zenith::compile(model, zenith_options(spec.name));
         return Mode{call_with<1>(fast), [fast] { return zenith_info(fast); }};
       })) {
    Result r = named_result(spec, maker.name);
    if (sweep.expected.size() != sweep.checked_steps.size()) {
      r.fail("eager failed, so there is nothing to check against");
    } else {
      try {
        r = sweep_mode(context, spec, maker, sweep);
      } catch (const std::exception& error) {
        r.fail(error_message(error));
      }
    }
    results.push_back(r);
  }
  return results;
}

}  // namespace zenith::bench
