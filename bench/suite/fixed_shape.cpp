#include "fixed_shape.h"

#include <c10/util/Exception.h>
#include <torch/torch.h>

#include "accuracy.h"
#include "case_files.h"
#include "kernel_profile.h"
#include "memory_trace.h"
#include "timing.h"

namespace zenith::bench {

namespace {

constexpr std::size_t kProfiledKernels = 15;

// Where a warm call's time goes (`--profile N`): wall time against device busy time tells a
// host-bound mode from a device-bound one, and the longest kernels say which. Run after the timed
// calls and the peak's record, so neither sees the profiler.
void profile_mode(const Context& context, const FixedCase& c, const std::string& mode_name, const Mode& mode, Result& r) {
  const auto profile = profile_kernels([&] { mode.call(c.inputs); }, context.profile_calls, kProfiledKernels);
  std::printf("%s\n", profile.to_markdown(c.spec->name + ", " + mode_name).c_str());
  std::fflush(stdout);
  r.extra["profile"] = {{"calls", context.profile_calls},
                        {"wall_ms", profile.wall_ms},
                        {"device_busy_ms", profile.device_ms},
                        {"kernels", profile.kernels}};
}

// Setup, first call, check, warm-up and timing of one mode; throws on any failure. An empty
// `expected` means this mode is the reference (eager): its output becomes `expected`.
void measure_mode(const Context& context, const FixedCase& c, const ModeMaker& maker, Tensors& expected, Result& r) {
  PeakMemory memory(context.device);
  Mode mode;
  r.setup_ms = wall_ms(context.device, [&] { mode = maker.make(); });
  mode.call = traced_calls(std::move(mode.call), context.device, c.spec->name + " " + maker.name,
                           context.memory_trace_calls, context.memory_history);
  Tensors out;
  r.first_call_ms = wall_ms(context.device, [&] { out = mode.call(c.inputs); });
  for (int i = 1; i < context.warmup_calls(); ++i) out = mode.call(c.inputs);
  // Checked after warm-up: TorchScript's profiling executor and Zenith's replay only take their
  // optimized path from the second or third call on, and that path is the one timed.
  if (expected.empty()) {
    expected = out;
    r.max_rel_error = 0;
  } else {
    memory.exclude([&] { r.max_rel_error = check_close(out, expected, c.dtype, maker.name + " against eager"); });
  }
  memory.mark_warm();
  const auto samples = time_calls(context.device, [&] { mode.call(c.inputs); }, context.seconds_per_mode,
                                  context.min_reps(), context.max_reps());
  r.median_ms = samples.median_ms;
  r.p90_ms = samples.p90_ms;
  r.reps = samples.reps;
  memory.record(r);
  if (context.profile_calls > 0) profile_mode(context, c, maker.name, mode, r);
  if (mode.info) r.extra["plan"] = mode.info();
}

}  // namespace

Result named_result(const CaseSpec& spec, const std::string& mode) {
  Result r;
  r.case_name = spec.name;
  r.workload = spec.workload;
  r.mode = mode;
  return r;
}

std::vector<Result> measure_fixed(const Context& context, const FixedCase& c, const std::vector<ModeMaker>& modes) {
  std::vector<Result> results;
  Tensors expected;
  {
    // Eager inference as LibTorch recommends it; the other modes run under no_grad, which is what
    // their capture (tracing) and loaders are written for.
    c10::InferenceMode inference;
    Result r = named_result(*c.spec, "eager");
    try {
      measure_mode(context, c, ModeMaker{"eager", [&] { return Mode{c.eager, nullptr}; }}, expected, r);
      // The same weights and inputs through Python's copy of the model: the Python modes are
      // compared against that output, so the two eager outputs must agree.
      if (!c.python_outputs.empty()) {
        r.extra["python_eager_rel_error"] = check_close(expected, c.python_outputs, c.dtype, "C++ eager against Python eager");
      }
    } catch (const std::exception& error) {
      r.fail(error_message(error));
    }
    results.push_back(r);
  }
  torch::NoGradGuard no_grad;
  for (const auto& maker : modes) {
    Result r = named_result(*c.spec, maker.name);
    if (expected.empty()) {
      r.fail("eager failed, so there is nothing to check against");
    } else {
      try {
        measure_mode(context, c, maker, expected, r);
      } catch (const std::exception& error) {
        r.fail(error_message(error));
      }
    }
    results.push_back(r);
  }
  return results;
}

std::vector<ModeMaker> standard_modes(const Context& context, const CaseFiles& files, std::function<Mode()> zenith) {
  std::vector<ModeMaker> makers;
  const auto device = context.device;
  if (context.wants("torchscript")) {
    makers.push_back({"torchscript", [&files, device] { return Mode{torchscript_call(files.artifact("ts.pt"), device), nullptr}; }});
  }
  if (context.wants("zenith")) makers.push_back({"zenith", std::move(zenith)});
  if (context.wants("aoti")) {
    makers.push_back({"aoti", [&files, device] { return Mode{aoti_call(files.artifact("aoti.pt2"), device), nullptr}; }});
  }
  return makers;
}

}  // namespace zenith::bench
