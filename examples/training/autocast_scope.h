// Autocast to bfloat16 for one forward, as Python's torch.autocast does it: enabled on entry, the
// previous state restored and the cast-weight cache dropped on exit. Both training examples wrap
// each forward (and loss) in one when run with --dtype bfloat16; backward and the optimizer step
// run outside it, as PyTorch recommends.
#pragma once

#include <ATen/autocast_mode.h>
#include <torch/torch.h>

namespace zenith::examples {

class AutocastScope {
 public:
  /// `enabled` false makes a scope that does nothing (the float32 runs).
  AutocastScope(c10::DeviceType device, bool enabled) : device_(device), enabled_(enabled) {
    if (!enabled_) return;
    was_enabled_ = at::autocast::is_autocast_enabled(device_);
    was_dtype_ = at::autocast::get_autocast_dtype(device_);
    at::autocast::set_autocast_enabled(device_, true);
    at::autocast::set_autocast_dtype(device_, torch::kBFloat16);
    at::autocast::increment_nesting();
  }
  ~AutocastScope() {
    if (!enabled_) return;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_autocast_enabled(device_, was_enabled_);
    at::autocast::set_autocast_dtype(device_, was_dtype_);
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  c10::DeviceType device_;
  bool enabled_;
  bool was_enabled_ = false;
  c10::ScalarType was_dtype_ = torch::kBFloat16;
};

}  // namespace zenith::examples
