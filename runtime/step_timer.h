// StepTimer: the host and device time of each step of one plan run, for a replay profile.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include <c10/core/Device.h>
#include <c10/core/Event.h>

#include "core/plan.h"

namespace zenith {

/// When one step ran, in microseconds since the timer's origin (a steady clock).
struct StepTiming {
  /// Index of the step in its plan.
  std::size_t step = 0;
  /// From just before the launch to its return: what the step cost the host.
  double host_start_us = 0;
  double host_us = 0;
  /// Between events recorded on the step's stream before and after its launch: what it cost the
  /// device. Empty for host steps and CPU kernels (their host time is their whole time).
  std::optional<double> device_start_us;
  std::optional<double> device_us;
};

/// Times the steps of a plan run. The executor calls before() and after() around each step; the
/// caller then calls finish() once. On a device with streams (CUDA) the first step there waits for
/// the work already queued on its stream, so that device times line up with host times.
class StepTimer {
 public:
  using Clock = std::chrono::steady_clock;

  /// Times are measured from `origin` (the profile's, so that runs share one time line).
  explicit StepTimer(Clock::time_point origin = Clock::now()) : origin_(origin) {}

  /// Called just before step `index` of a plan launches.
  void before(std::size_t index, const Step& step);
  /// Called just after it returned.
  void after(const Step& step);
  /// Waits for the device events and returns one timing per step run, in order.
  std::vector<StepTiming> finish();

 private:
  // Where a device's time line meets the host's: an event recorded when its stream was idle.
  struct DeviceOrigin {
    std::unique_ptr<c10::Event> event;
    double host_us = 0;
  };
  struct Pending {
    StepTiming timing;
    c10::Device device = c10::Device(c10::kCPU);
    std::unique_ptr<c10::Event> start, end;
  };

  double now_us() const;
  DeviceOrigin& origin_of(const c10::Device& device);

  Clock::time_point origin_;
  std::unordered_map<c10::Device, DeviceOrigin> device_origins_;
  std::vector<Pending> pending_;
};

}  // namespace zenith
