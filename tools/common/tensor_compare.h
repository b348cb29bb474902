// Comparing an output with its reference: the rule replay and conformance apply alike.
#pragma once

#include <string>

#include <ATen/core/Tensor.h>

namespace zenith::tools {

/// Allowed difference: |actual - expected| <= atol + rtol * |expected|.
struct Tolerance {
  double atol = 0;
  double rtol = 0;
};

/// 1e-5 / 1e-5 for float32, float64 and complex; 1e-2 / 1e-2 for float16 and bfloat16 (their
/// epsilon is near 1e-3, so a reordered sum already differs there); exact for integers and bool.
Tolerance tolerance_for(c10::ScalarType dtype);

/// "atol 1e-05 + rtol 1e-05 * |ref|", or "exact".
std::string describe(const Tolerance& tolerance);

/// The outcome of one comparison.
struct Comparison {
  bool matches = false;
  /// Largest |actual - expected| over elements that do not match trivially (NaN where actual has a
  /// NaN the reference lacks); 0 for an exact match.
  double max_abs_diff = 0;
  /// Set when the tensors cannot be compared element by element (shape, dtype, undefined).
  std::string problem;
};

/// Compares element by element; NaN matches NaN and infinities match themselves.
Comparison compare_tensors(const at::Tensor& actual, const at::Tensor& expected, const Tolerance& tolerance);

}  // namespace zenith::tools
