// What the GPU did while a piece of host code ran, through LibTorch's Kineto profiler: how many
// kernels, copies and memsets, their total device time against the wall time (the gap is the GPU
// waiting on the host), and the kernels that took longest. Benchmarks use it to say where a step's
// time goes; it is not part of the library.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace zenith::bench {

/// One kernel name's share of a profiled run.
struct KernelTotal {
  std::string name;      ///< the kernel's name as CUPTI reports it (demangled)
  std::int64_t count = 0;
  double device_ms = 0;  ///< summed over its launches
};

/// A profiled run's device activity.
struct KernelProfile {
  double wall_ms = 0;            ///< host time of the run, the device synchronized at both ends
  double device_ms = 0;          ///< summed device time of every kernel, copy and memset
  std::int64_t kernels = 0;      ///< kernel launches
  std::int64_t copies = 0;       ///< memcpy operations (device to device, host to device, ...)
  double copy_ms = 0;            ///< their summed device time
  std::int64_t memsets = 0;
  double memset_ms = 0;          ///< their summed device time
  std::vector<KernelTotal> top;  ///< kernels by summed device time, longest first

  /// A Markdown block: the totals, then the `top` kernels as a table.
  std::string to_markdown(const std::string& title) const;
};

/// Runs `body` `repeats` times under the profiler (CPU and CUDA activity) and returns the device
/// activity per run (totals divided by `repeats`), keeping the `keep` longest kernels. The device
/// is synchronized before and after. Throws when the profiler cannot start.
KernelProfile profile_kernels(const std::function<void()>& body, int repeats, std::size_t keep);

}  // namespace zenith::bench
