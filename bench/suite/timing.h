// How the suite times calls: CUDA events around each call on a GPU (the host clock on the CPU),
// one call at a time with the device synchronized in between, so that a call's time includes the
// host launching it; medians and 90th percentiles over many calls; peak device memory.
#pragma once

#include <functional>
#include <vector>

#include <torch/types.h>

#include "result.h"

namespace zenith::bench {

struct Samples {
  double median_ms = 0;
  double p90_ms = 0;
  double max_ms = 0;
  int reps = 0;
};

/// Median, 90th percentile and maximum of `ms` (empty: zeros).
Samples summarize(std::vector<double> ms);

/// Waits for the device's queued work (nothing on the CPU).
void synchronize(const torch::Device& device);

/// Wall-clock milliseconds of `body`, the device synchronized before and after: what a caller
/// waits, host work (tracing, compiling) included.
double wall_ms(const torch::Device& device, const std::function<void()>& body);

/// Host milliseconds until `body` returns, nothing synchronized: within a wall_ms, the part of a
/// step the host spends before only the device's work is left.
double host_ms(const std::function<void()>& body);

/// Times `body` one call at a time until `seconds` are spent, at least `min_reps` and at most
/// `max_reps` times. Warm-up is the caller's business.
Samples time_calls(const torch::Device& device, const std::function<void()>& body, double seconds, int min_reps,
                   int max_reps);

/// The CUDA caching allocator's byte counts on `device` (a CUDA device), now and at their peaks
/// since the last reset.
struct AllocatorBytes {
  std::int64_t allocated = 0, allocated_peak = 0, reserved = 0, reserved_peak = 0;
};
AllocatorBytes allocator_bytes(const torch::Device& device);

/// Device memory above what was in use when it was made, at its peak: what a mode needs beyond the
/// weights and inputs every mode shares. NaN on the CPU.
class PeakMemory {
 public:
  /// Gives the caching allocator's unused blocks back to the device first, so that reserved
  /// memory starts from what is allocated.
  explicit PeakMemory(const torch::Device& device);
  /// Marks the end of setup and warm-up, before the timed calls: what is allocated now above the
  /// start is what the mode holds between calls, and the allocated peak from here on is a warm
  /// call's. Once, at most.
  void mark_warm();
  /// Runs `body`, the suite's own work between a mode's calls (checking its results against
  /// eager's, which only the other modes do), with the memory it needs kept out of the peaks: the
  /// peaks so far are kept here, and once `body` is done the allocator's unused blocks go back to
  /// the device and its peaks start afresh. Also pauses a `--memory-history` recording.
  void exclude(const std::function<void()>& body);
  /// Writes the peaks so far into `r`, in MB above the start: `peak_mb`, allocated memory (tensors
  /// alive), and `reserved_mb`, the allocator's segments, which include the memory pools of CUDA
  /// graphs (kept for their replays whether or not a tensor of the pool is alive: a graph's
  /// intermediates are freed to its pool when its capture ends, and count as allocated only then)
  /// and its rounding and cached blocks. After mark_warm, also `extra["held_mb"]`, allocated at
  /// the mark above the start (what a mode keeps between calls: Zenith's kept weight copies, say),
  /// and `extra["warm_call_peak_mb"]`, the allocated peak of the calls after the mark above what
  /// was allocated at the mark.
  void record(Result& r) const;

 private:
  torch::Device device_;
  std::int64_t allocated_base_ = 0;
  std::int64_t reserved_base_ = 0;
  bool warm_ = false;
  std::int64_t allocated_warm_ = 0;  // allocated at mark_warm

  struct Peaks {
    std::int64_t allocated = 0, reserved = 0;
  };
  // The phase's peaks so far: those kept here, raised to the allocator's since its last reset.
  Peaks phase_peaks() const;
  Peaks before_warm_;  // the peaks up to mark_warm
  Peaks kept_;         // the phase's peaks (since the start or mark_warm) before the allocator's last reset
};

}  // namespace zenith::bench
