// Putting the default random generators back as they were: a second run of a forward (the
// unseen-data check, the backward capture's forward values) must not move the random stream the
// application sees.
#pragma once

#include <mutex>
#include <utility>
#include <vector>

#include <ATen/Context.h>
#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

namespace zenith::capture {

/// Saves the states of the default generators of `devices` and restores them on destruction.
class RandomStateGuard {
 public:
  explicit RandomStateGuard(const std::vector<c10::Device>& devices) {
    for (const auto& device : devices) {
      auto generator = at::globalContext().defaultGenerator(device);
      std::lock_guard<std::mutex> lock(generator.mutex());
      saved_.emplace_back(generator, generator.get_state());
    }
  }
  ~RandomStateGuard() {
    for (auto& [generator, state] : saved_) {
      std::lock_guard<std::mutex> lock(generator.mutex());
      generator.set_state(state);
    }
  }
  RandomStateGuard(const RandomStateGuard&) = delete;
  RandomStateGuard& operator=(const RandomStateGuard&) = delete;

 private:
  std::vector<std::pair<at::Generator, at::Tensor>> saved_;
};

}  // namespace zenith::capture
