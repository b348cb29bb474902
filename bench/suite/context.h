// What every workload of a suite run shares: the device, where the Python side left weights,
// inputs and artifacts, which C++ modes to run, and how much time is left.
#pragma once

#include <chrono>
#include <set>
#include <string>

#include <torch/types.h>

namespace zenith::bench {

struct Context {
  torch::Device device = torch::kCPU;
  /// Tiny sizes, correctness only (the CPU smoke test): one timed call per mode.
  bool smoke = false;
  /// The folder prepare.py filled (weights, inputs, eager outputs, TorchScript and AOTInductor
  /// artifacts). Empty: weights and inputs are made here and only C++ modes run (smoke).
  std::string dir;
  /// C++ modes to run besides eager: torchscript, zenith, aoti.
  std::set<std::string> modes;
  /// Seconds of timed calls per case and mode, after warm-up.
  double seconds_per_mode = 1.0;
  /// After this, cases not yet started are recorded as skipped, so that the run ends in time.
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  /// Zenith's kernel cache folder for this run: NVRTC compiles are counted as new files in it.
  std::string kernel_cache_dir;
  /// `--memory-trace N`: a mode's first N calls say where memory went (memory_trace.h); 0: off.
  int memory_trace_calls = 0;
  /// `--memory-history`: over those calls, which allocations make the peak (memory_history.h).
  bool memory_history = false;
  /// `--profile N`: after a fixed-shape case's timed calls, N more of each mode under the profiler
  /// (bench/kernel_profile.h), printed on standard output; 0: off. CUDA only.
  int profile_calls = 0;

  bool wants(const std::string& mode) const { return modes.count(mode) > 0; }
  bool past_deadline() const { return std::chrono::steady_clock::now() > deadline; }
  /// Calls before the checked one: Zenith's first call of a signature returns the trace's own
  /// (eager) result and TorchScript's profiling executor optimizes from the third call on, so the
  /// checked output must come from a later call, even in a smoke run.
  int warmup_calls() const { return smoke ? 2 : 5; }
  int min_reps() const { return smoke ? 1 : 10; }
  int max_reps() const { return smoke ? 1 : 200; }
};

}  // namespace zenith::bench
