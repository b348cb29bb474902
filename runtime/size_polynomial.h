// How one integer of a plan (a size, a stride, a view's shape argument) depends on the symbolic
// dimensions, fitted from captures at chosen sizes and checked at one more.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace zenith::capture {

/// The sizes of the symbolic dimensions at which the forward is captured. points[0] is the call's
/// own sizes (the base); then, per dimension, one and two steps from the base; per pair of
/// dimensions, one step in both; last, a point further away where every dimension moves, which
/// only checks the fit. Steps go down from a base of 5 or more and up from smaller ones, so that no
/// probe size falls below 2 or beyond the next few sizes.
struct ProbeDesign {
  std::vector<std::int64_t> base;
  std::vector<int> step;  ///< +1 or -1 per dimension
  std::vector<std::vector<std::int64_t>> points;

  /// The design around `base` (every size at least 2).
  static ProbeDesign around(const std::vector<std::int64_t>& base);
};

/// An integer polynomial of degree at most 2 in the symbolic sizes: the shape of every size and
/// stride of a transformer (batch * sequence, heads * sequence^2) and of shifted or concatenated
/// lengths (sequence - 1, past + sequence). Kept as twice its coefficients around the base so that
/// halves (n(n-1)/2) stay exact.
class SizePolynomial {
 public:
  /// Fits the values seen at `design.points` (same order); nullopt when they do not follow such a
  /// polynomial (checked at the last point): floor divisions, cubes, data-dependent sizes.
  static std::optional<SizePolynomial> fit(const ProbeDesign& design, const std::vector<std::int64_t>& values);

  /// The value at `sizes`; nullopt when the polynomial is not an integer there or overflows.
  std::optional<std::int64_t> at(const std::vector<std::int64_t>& sizes) const;

 private:
  std::vector<std::int64_t> base_;
  std::int64_t twice_constant_ = 0;
  std::vector<std::int64_t> twice_linear_;
  std::vector<std::vector<std::int64_t>> twice_quadratic_;  // [i][j], j >= i
};

}  // namespace zenith::capture
