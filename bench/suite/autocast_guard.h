// Mixed precision for a region, as torch.autocast does in Python: matrix products and
// convolutions run in the lower precision, reductions and losses stay in float32. LibTorch has
// the switches but no scoped guard, hence this one.
#pragma once

#include <ATen/autocast_mode.h>

namespace zenith::bench {

class AutocastGuard {
 public:
  AutocastGuard(c10::DeviceType device, c10::ScalarType dtype)
      : device_(device),
        was_enabled_(at::autocast::is_autocast_enabled(device)),
        old_dtype_(at::autocast::get_autocast_dtype(device)) {
    at::autocast::set_autocast_enabled(device_, true);
    at::autocast::set_autocast_dtype(device_, dtype);
  }
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;
  ~AutocastGuard() {
    at::autocast::set_autocast_enabled(device_, was_enabled_);
    at::autocast::set_autocast_dtype(device_, old_dtype_);
    // Casts of the weights are cached while autocast is on; they are stale after the optimizer step.
    at::autocast::clear_cache();
  }

 private:
  c10::DeviceType device_;
  bool was_enabled_;
  c10::ScalarType old_dtype_;
};

}  // namespace zenith::bench
