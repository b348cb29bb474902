// The lowest finite value of a floating dtype: what models fill additive attention masks with
// (torch.finfo(dtype).min).
#pragma once

#include <limits>

#include <c10/core/ScalarType.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

namespace zenith::testing {

inline double lowest_finite(c10::ScalarType dtype) {
  if (dtype == c10::ScalarType::Half) return static_cast<double>(std::numeric_limits<c10::Half>::lowest());
  if (dtype == c10::ScalarType::BFloat16) return static_cast<double>(std::numeric_limits<c10::BFloat16>::lowest());
  return static_cast<double>(std::numeric_limits<float>::lowest());
}

}  // namespace zenith::testing
