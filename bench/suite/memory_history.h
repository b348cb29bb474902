// `--memory-history`: which allocations make a mode's peak. Over a mode's traced calls
// (`--memory-trace N`) the CUDA caching allocator records every allocation and free with the C++
// stack that made it; after the last of them its history is replayed to find the moment allocated
// memory peaked, and the allocations alive then are printed, grouped by where they were made; the
// same for reserved memory (the allocator's segments, and how much of them a live block holds),
// and the segments at the end by memory pool and stream. A diagnostic: recording a stack per
// allocation slows the calls it watches many times over.
#pragma once

#include <cstdio>
#include <memory>
#include <string>

#include <torch/torch.h>

namespace zenith::bench {

class MemoryHistory {
 public:
  /// Starts recording on `device` (a CUDA device; elsewhere nothing is recorded and report()
  /// prints nothing). One at a time in the process: the allocator keeps a single history.
  explicit MemoryHistory(const torch::Device& device);
  /// Stops recording if report() did not.
  ~MemoryHistory();
  MemoryHistory(const MemoryHistory&) = delete;
  MemoryHistory& operator=(const MemoryHistory&) = delete;

  /// Marks the end of a call in the history (an allocation on a stream of the history's own), so
  /// that report() can say in which call the peak came.
  void mark_call_end();

  /// The MemoryHistory recording in this process now, or nullptr.
  static MemoryHistory* recording();
  /// Marks the start or the end (they alternate) of work the history leaves out, the suite's
  /// checks between calls (HistoryPaused): an allocation on a stream of its own.
  void mark_pause();

  /// Stops recording and prints to `out` lines that start "history <label>": the allocated peak
  /// over what was recorded (MB above what was allocated when recording began, less what older
  /// blocks freed by then gave back) and the call it came in, the allocations alive at that moment
  /// grouped by their first C++ frames outside the allocator (the `groups` largest), the same for
  /// the first call's own peak when the run's came later; the reserved peak and what was reserved
  /// after the first call, the segments the history made grouped the same way; and the segments
  /// reserved now, by pool and stream (allocation_timeline.h replays the history). Only once; later
  /// calls print nothing.
  void report(const std::string& label, std::FILE* out, int groups = 12);

 private:
  torch::Device device_;
  bool recording_ = false;
  void* marker_stream_ = nullptr;  // cudaStream_t
  void* pause_stream_ = nullptr;   // cudaStream_t
};

/// While one lives, the recording MemoryHistory (if any) leaves the allocations out of its report.
class HistoryPaused {
 public:
  HistoryPaused();
  ~HistoryPaused();
  HistoryPaused(const HistoryPaused&) = delete;
  HistoryPaused& operator=(const HistoryPaused&) = delete;

 private:
  MemoryHistory* history_;
};

}  // namespace zenith::bench
