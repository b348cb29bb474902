// How one integer of a plan (a size, a stride, a view's shape argument) depends on the symbolic
// dimensions, fitted from captures at chosen sizes and checked at one more.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace zenith::capture {

/// The sizes of the symbolic dimensions at which the forward is captured. points[0] is the call's
/// own sizes (the base). The polynomial is fitted by finite differences around the anchor: the
/// anchor itself, per dimension one and two steps from it, per pair of dimensions one step in
/// both. One point away from all of those, where every dimension moves, only checks the fit.
///
/// Far design (every size kFarSize or more): the anchor is a quarter of each size, points[1] is
/// the anchor, and the base itself is the check. The probes then run the forward on inputs a
/// quarter of the call's (a sixteenth for two sizes), so that probing holds far less memory than
/// the call does (the sweep's probes at its full sizes had three results alive beside the call's
/// own on the H200). Near design (any size below kFarSize): the anchor is the base, and the check
/// point comes last, half the base plus one (five past a size below 8).
///
/// Steps go down from an anchor of 5 or more and up from smaller ones, so that no probe size falls
/// below 2.
struct ProbeDesign {
  /// The size from which, when every size is at least this, the far design anchors a quarter of
  /// the way down.
  static constexpr std::int64_t kFarSize = 32;

  std::vector<std::int64_t> base;
  std::vector<std::int64_t> anchor;  ///< where the finite differences are taken
  std::vector<int> step;             ///< +1 or -1 per dimension
  std::vector<std::vector<std::int64_t>> points;

  /// The anchor's place in `points`: 0 when it is the base (near), else 1 (far).
  std::size_t anchor_index() const { return anchor == base ? 0 : 1; }

  /// The design for `base` (every size at least 2): far when every size is kFarSize or more, else
  /// near.
  static ProbeDesign around(const std::vector<std::int64_t>& base);
  /// The near design for `base` (every size at least 2).
  static ProbeDesign near(const std::vector<std::int64_t>& base);
  /// The far design for `base` (every size at least kFarSize, so that every probe size is 6 or
  /// more).
  static ProbeDesign far(const std::vector<std::int64_t>& base);
};

/// An integer polynomial of degree at most 2 in the symbolic sizes: the shape of every size and
/// stride of a transformer (batch * sequence, heads * sequence^2) and of shifted or concatenated
/// lengths (sequence - 1, past + sequence). Kept as twice its coefficients around the design's
/// anchor so that halves (n(n-1)/2) stay exact.
class SizePolynomial {
 public:
  /// Fits the values seen at `design.points` (same order); nullopt when they do not follow such a
  /// polynomial (checked at every point, the check point above all): floor divisions, cubes,
  /// data-dependent sizes.
  static std::optional<SizePolynomial> fit(const ProbeDesign& design, const std::vector<std::int64_t>& values);

  /// The value at `sizes`; nullopt when the polynomial is not an integer there or overflows.
  std::optional<std::int64_t> at(const std::vector<std::int64_t>& sizes) const;

 private:
  std::vector<std::int64_t> anchor_;
  std::int64_t twice_constant_ = 0;
  std::vector<std::int64_t> twice_linear_;
  std::vector<std::vector<std::int64_t>> twice_quadratic_;  // [i][j], j >= i
};

}  // namespace zenith::capture
