// Fresh inputs for compiled-against-eager tests (issue 13, "never a wrong result"): a plan must
// compute, not remember. A test that compared a compiled module with eager only on the input it
// traced (or on that input twice) would pass a plan that replays values captured at trace time, so
// every such test calls each signature at least twice, the first call (the capture) and later ones
// (the plan) on fresh values of that signature, each against eager on the same values.
#pragma once

#include <string>

#include <ATen/ATen.h>

namespace zenith::testing {

/// Calls per signature in a compiled-against-eager comparison: the capture and two replays, each
/// on fresh values.
constexpr int kCallsPerSignature = 3;

/// "call N (the capture)" or "call N (a replay on fresh values)", for failure messages.
inline std::string call_name(int call) {
  return "call " + std::to_string(call) + (call == 0 ? " (the capture)" : " (a replay on fresh values)");
}

/// A tensor of `like`'s signature, with fresh values from the global generator (seed it first):
/// the same dtype, sizes, strides, storage offset (so a misaligned view stays misaligned), device
/// and requires_grad, in a storage of its own. Floating and complex values are standard normal,
/// so use it only where `like` was drawn that way; integer and bool tensors get the elements of
/// `like`'s storage shuffled, so that indices stay in range and masks keep their density.
inline at::Tensor fresh_like(const at::Tensor& like) {
  const auto elements = static_cast<std::int64_t>(like.storage().nbytes()) / like.element_size();
  const auto options = like.options().requires_grad(false);
  at::Tensor storage;
  if (at::isFloatingType(like.scalar_type()) || at::isComplexType(like.scalar_type())) {
    storage = at::randn({elements}, options);
  } else {
    auto old = at::empty({0}, options).set_(like.storage(), 0, {elements}, {1});
    storage = old.index_select(0, at::randperm(elements, options.dtype(at::kLong)));
  }
  return storage.as_strided(like.sizes(), like.strides(), like.storage_offset())
      .detach()
      .requires_grad_(like.requires_grad());
}

}  // namespace zenith::testing
