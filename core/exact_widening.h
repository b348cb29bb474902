// Which floating dtypes hold every value of another exactly: the casts that passes may move or
// merge without changing a value.
#pragma once

#include <c10/core/ScalarType.h>

namespace zenith::ir {

/// Whether floating dtype `wide` represents every value of `narrow` exactly (NaN stays NaN,
/// infinities stay infinite): float16 and bfloat16 in float32 or float64, float32 in float64.
inline bool holds_exactly(c10::ScalarType narrow, c10::ScalarType wide) {
  const bool half = narrow == c10::kHalf || narrow == c10::kBFloat16;
  return (half && (wide == c10::kFloat || wide == c10::kDouble)) || (narrow == c10::kFloat && wide == c10::kDouble);
}

}  // namespace zenith::ir
