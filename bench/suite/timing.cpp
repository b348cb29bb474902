#include "timing.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/cuda.h>

#include "memory_history.h"

namespace zenith::bench {

namespace {

using Clock = std::chrono::steady_clock;

double since_ms(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// One call's milliseconds: between two CUDA events on the current stream, so that the figure is
// the device's, not the host's view of an asynchronous launch.
double one_call_ms(const torch::Device& device, const std::function<void()>& body) {
  if (!device.is_cuda()) return wall_ms(device, body);
  at::cuda::CUDAEvent start(cudaEventDefault), stop(cudaEventDefault);
  start.record();
  body();
  stop.record();
  stop.synchronize();
  return start.elapsed_time(stop);
}

c10::DeviceIndex index_of(const torch::Device& device) { return device.index() < 0 ? 0 : device.index(); }

}  // namespace

AllocatorBytes allocator_bytes(const torch::Device& device) {
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(index_of(device));
  const auto all = static_cast<std::size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  return {stats.allocated_bytes[all].current, stats.allocated_bytes[all].peak, stats.reserved_bytes[all].current,
          stats.reserved_bytes[all].peak};
}

Samples summarize(std::vector<double> ms) {
  Samples s;
  s.reps = static_cast<int>(ms.size());
  if (ms.empty()) return s;
  std::sort(ms.begin(), ms.end());
  s.median_ms = ms[ms.size() / 2];
  s.p90_ms = ms[std::min(ms.size() - 1, static_cast<std::size_t>(std::ceil(0.9 * ms.size())) - 1)];
  s.max_ms = ms.back();
  return s;
}

void synchronize(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

double wall_ms(const torch::Device& device, const std::function<void()>& body) {
  synchronize(device);
  const auto start = Clock::now();
  body();
  synchronize(device);
  return since_ms(start);
}

double host_ms(const std::function<void()>& body) {
  const auto start = Clock::now();
  body();
  return since_ms(start);
}

Samples time_calls(const torch::Device& device, const std::function<void()>& body, double seconds, int min_reps,
                   int max_reps) {
  std::vector<double> ms;
  const auto start = Clock::now();
  while (static_cast<int>(ms.size()) < max_reps &&
         (static_cast<int>(ms.size()) < min_reps || since_ms(start) < 1000 * seconds)) {
    ms.push_back(one_call_ms(device, body));
  }
  return summarize(std::move(ms));
}

PeakMemory::PeakMemory(const torch::Device& device) : device_(device) {
  if (!device_.is_cuda()) return;
  synchronize(device_);
  c10::cuda::CUDACachingAllocator::emptyCache();
  c10::cuda::CUDACachingAllocator::resetPeakStats(index_of(device_));
  const auto start = allocator_bytes(device_);
  allocated_base_ = start.allocated;
  reserved_base_ = start.reserved;
}

PeakMemory::Peaks PeakMemory::phase_peaks() const {
  const auto now = allocator_bytes(device_);
  return {std::max(kept_.allocated, now.allocated_peak), std::max(kept_.reserved, now.reserved_peak)};
}

void PeakMemory::mark_warm() {
  if (!device_.is_cuda() || warm_) return;
  synchronize(device_);
  warm_ = true;
  // The peaks so far are kept here: resetting the allocator's starts a warm call's afresh.
  before_warm_ = phase_peaks();
  kept_ = Peaks{};
  c10::cuda::CUDACachingAllocator::resetPeakStats(index_of(device_));
  allocated_warm_ = allocator_bytes(device_).allocated;
}

void PeakMemory::exclude(const std::function<void()>& body) {
  if (!device_.is_cuda()) return body();
  synchronize(device_);
  kept_ = phase_peaks();
  {
    const HistoryPaused paused;
    body();
    synchronize(device_);
  }
  c10::cuda::CUDACachingAllocator::emptyCache();
  c10::cuda::CUDACachingAllocator::resetPeakStats(index_of(device_));
}

void PeakMemory::record(Result& r) const {
  if (!device_.is_cuda()) return;  // the Result's NaN stands
  synchronize(device_);
  constexpr double kMiB = 1 << 20;
  const auto phase = phase_peaks();
  r.peak_mb = static_cast<double>(std::max(before_warm_.allocated, phase.allocated) - allocated_base_) / kMiB;
  r.reserved_mb = static_cast<double>(std::max(before_warm_.reserved, phase.reserved) - reserved_base_) / kMiB;
  if (!warm_) return;
  r.extra["held_mb"] = static_cast<double>(allocated_warm_ - allocated_base_) / kMiB;
  r.extra["warm_call_peak_mb"] = static_cast<double>(phase.allocated - allocated_warm_) / kMiB;
}

}  // namespace zenith::bench
