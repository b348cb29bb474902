#include "runtime/step_timer.h"

#include <c10/core/Stream.h>
#include <c10/core/impl/VirtualGuardImpl.h>

namespace zenith {
namespace {

// The stream a step's launch goes to: PyTorch's current stream on its device (as the executor's).
c10::Stream stream_of(const c10::Device& device) {
  c10::impl::VirtualGuardImpl guard(device.type());
  return guard.getStream(device);
}

// Timing events: PyTorch's default events cannot be timed.
std::unique_ptr<c10::Event> recorded_event(const c10::Device& device) {
  auto event = std::make_unique<c10::Event>(device.type(), c10::EventFlag::BACKEND_DEFAULT);
  event->record(stream_of(device));
  return event;
}

bool runs_on_a_stream(const Step& step) { return step.kind == Step::Kind::Kernel && !step.device.is_cpu(); }

}  // namespace

double StepTimer::now_us() const {
  return std::chrono::duration<double, std::micro>(Clock::now() - origin_).count();
}

StepTimer::DeviceOrigin& StepTimer::origin_of(const c10::Device& device) {
  auto found = device_origins_.find(device);
  if (found != device_origins_.end()) return found->second;
  // The origin event is recorded on an idle stream and waited for before the host reads its
  // clock: the device passed it at most that wait's latency before the host time it stands for, so
  // device spans are placed at worst a few microseconds late, never before the launch.
  stream_of(device).synchronize();
  DeviceOrigin origin;
  origin.event = recorded_event(device);
  origin.event->synchronize();
  origin.host_us = now_us();
  return device_origins_.emplace(device, std::move(origin)).first->second;
}

void StepTimer::before(std::size_t index, const Step& step) {
  Pending pending;
  pending.timing.step = index;
  pending.device = step.device;
  if (runs_on_a_stream(step)) {
    origin_of(step.device);
    pending.start = recorded_event(step.device);
  }
  pending.timing.host_start_us = now_us();
  pending_.push_back(std::move(pending));
}

void StepTimer::after(const Step& step) {
  auto& pending = pending_.back();
  pending.timing.host_us = now_us() - pending.timing.host_start_us;
  if (pending.start) pending.end = recorded_event(step.device);
}

std::vector<StepTiming> StepTimer::finish() {
  std::vector<StepTiming> timings;
  timings.reserve(pending_.size());
  for (auto& pending : pending_) {
    if (pending.start && pending.end) {
      pending.end->synchronize();
      const auto& origin = device_origins_.at(pending.device);
      // elapsedTime is in milliseconds, from the event it is called on to its argument.
      pending.timing.device_start_us = origin.host_us + origin.event->elapsedTime(*pending.start) * 1000.0;
      pending.timing.device_us = pending.start->elapsedTime(*pending.end) * 1000.0;
    }
    timings.push_back(pending.timing);
  }
  pending_.clear();
  device_origins_.clear();
  return timings;
}

}  // namespace zenith
