// ReplayProfile: timed plan runs written in the trace-event format that Perfetto
// (ui.perfetto.dev) and chrome://tracing open (docs/profiling.md).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/plan.h"
#include "runtime/step_timer.h"

namespace zenith {

/// What a profile calls a step: the kernel's name as its plugin gave it (zn_compile_args.kernel_name),
/// else its ops joined by "+" (the first few, then how many more); a host step is its op.
std::string step_name(const Plan& plan, const Step& step);

/// The runs of plans, one trace. Each run is a span on the host track holding one span per step;
/// steps timed on a device also get a span on that device's track. Every step span carries its
/// step index, backend, kernel name, group (the graph's node indices), ops and times in "args".
class ReplayProfile {
 public:
  /// `process` names the trace's process (the module, in Zenith's profiles).
  explicit ReplayProfile(std::string process);

  /// The origin every run of this profile is timed from: give it to each run's StepTimer.
  StepTimer::Clock::time_point origin() const { return origin_; }
  /// Adds one run of `plan`, timed by a StepTimer; `label` names the run ("call 2").
  void add_run(const Plan& plan, const std::vector<StepTiming>& timings, const std::string& label);
  /// Runs added so far.
  std::size_t runs() const { return runs_; }
  /// The trace: {"traceEvents": [...], "displayTimeUnit": "ms"}.
  nlohmann::json to_json() const;
  /// Writes the trace to `path` (replacing it); throws zenith::Error when it cannot.
  void write(const std::string& path) const;

 private:
  int track_of(const c10::Device& device);

  std::string process_;
  StepTimer::Clock::time_point origin_ = StepTimer::Clock::now();
  std::vector<nlohmann::json> events_;
  std::vector<std::string> tracks_;  // thread id k + 1 is tracks_[k]; 0 is the host
  std::size_t runs_ = 0;
};

}  // namespace zenith
