#pragma once

#include <c10/core/ScalarType.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <limits>

namespace zenith::models::detail {

// Fill value for additive attention masks: the most negative finite value of the score dtype.
// Finite rather than -inf so that a row with every key masked softmaxes to a uniform distribution
// instead of NaN; still so negative that exp() of it underflows to exactly 0, so masked keys
// contribute nothing at all (which the padding and causality tests rely on).
inline double mask_fill_value(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::ScalarType::Half:
      return static_cast<double>(std::numeric_limits<c10::Half>::lowest());
    case c10::ScalarType::BFloat16:
      return static_cast<double>(std::numeric_limits<c10::BFloat16>::lowest());
    case c10::ScalarType::Double:
      return std::numeric_limits<double>::lowest();
    default:
      return static_cast<double>(std::numeric_limits<float>::lowest());
  }
}

}  // namespace zenith::models::detail
