// The CUDA caching allocator's byte counts on the current device, read after the device finished
// what was queued on it: what the gpu tests of packing, graph pools and out-of-memory compare.
#pragma once

#include <cstddef>
#include <cstdint>

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <torch/cuda.h>

namespace zenith::testing {

/// The allocator's statistics of the current device over all its pools, once the device is done.
inline c10::CachingDeviceAllocator::DeviceStats device_stats() {
  torch::cuda::synchronize();
  return c10::cuda::CUDACachingAllocator::getDeviceStats(c10::cuda::current_device());
}

/// One statistic's aggregate over the pools.
inline c10::CachingAllocator::Stat aggregate(const c10::CachingAllocator::StatArray& stat) {
  return stat[static_cast<std::size_t>(c10::CachingAllocator::StatType::AGGREGATE)];
}

/// Bytes of tensors alive.
inline std::int64_t allocated_bytes() { return aggregate(device_stats().allocated_bytes).current; }

/// Bytes of the allocator's segments: tensors alive, cached blocks, CUDA graph pools.
inline std::int64_t reserved_bytes() { return aggregate(device_stats().reserved_bytes).current; }

/// The most bytes of tensors alive at once since the last reset_peaks().
inline std::int64_t allocated_peak_bytes() { return aggregate(device_stats().allocated_bytes).peak; }

/// Starts the allocator's peaks afresh from what is in use now.
inline void reset_peaks() {
  torch::cuda::synchronize();
  c10::cuda::CUDACachingAllocator::resetPeakStats(c10::cuda::current_device());
}

}  // namespace zenith::testing
