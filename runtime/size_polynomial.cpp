#include "runtime/size_polynomial.h"

#include <algorithm>
#include <utility>

namespace zenith::capture {

namespace {

// Per dimension one and two steps from the anchor, then per pair one step in both.
void add_stencil(ProbeDesign& design) {
  const auto& anchor = design.anchor;
  const std::size_t n = anchor.size();
  for (std::size_t i = 0; i < n; ++i) {
    for (int k = 1; k <= 2; ++k) {
      auto point = anchor;
      point[i] += k * design.step[i];
      design.points.push_back(point);
    }
  }
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = i + 1; j < n; ++j) {
      auto point = anchor;
      point[i] += design.step[i];
      point[j] += design.step[j];
      design.points.push_back(point);
    }
  }
}

// A design's start: the base as points[0], the anchor, and steps down from an anchor of 5 or more.
ProbeDesign started(const std::vector<std::int64_t>& base, std::vector<std::int64_t> anchor) {
  ProbeDesign design;
  design.base = base;
  design.anchor = std::move(anchor);
  for (auto size : design.anchor) design.step.push_back(size >= 5 ? -1 : 1);
  design.points.push_back(base);
  return design;
}

}  // namespace

ProbeDesign ProbeDesign::around(const std::vector<std::int64_t>& base) {
  // Far only when every size is large: a small size anchored elsewhere (five past it, say) while a
  // large one moved down kept the products of the two within a narrow range, where a rounding of
  // the product looked constant to every point (tests/unit/test_size_polynomial.cpp).
  const bool far = std::all_of(base.begin(), base.end(), [](std::int64_t size) { return size >= kFarSize; });
  return far ? ProbeDesign::far(base) : ProbeDesign::near(base);
}

ProbeDesign ProbeDesign::near(const std::vector<std::int64_t>& base) {
  auto design = started(base, base);
  add_stencil(design);
  // Far from the others, so that floor divisions and higher powers cannot agree with the fit by
  // chance: half the base when that stays above the fitted points, else five past it.
  std::vector<std::int64_t> check;
  for (auto size : base) check.push_back(size >= 8 ? size / 2 + 1 : size + 5);
  design.points.push_back(check);
  return design;
}

ProbeDesign ProbeDesign::far(const std::vector<std::int64_t>& base) {
  std::vector<std::int64_t> anchor;
  for (auto size : base) anchor.push_back(size / 4);
  auto design = started(base, std::move(anchor));
  design.points.push_back(design.anchor);
  add_stencil(design);
  return design;
}

std::optional<SizePolynomial> SizePolynomial::fit(const ProbeDesign& design, const std::vector<std::int64_t>& values) {
  const std::size_t n = design.anchor.size();
  SizePolynomial p;
  p.anchor_ = design.anchor;
  p.twice_linear_.assign(n, 0);
  p.twice_quadratic_.assign(n, std::vector<std::int64_t>(n, 0));
  // Finite differences with steps of +-1 (so 1/step == step): values one and two steps along
  // dimension i give its slope and curvature, one step along i and j their product term.
  const std::size_t origin = design.anchor_index();
  const std::int64_t c0 = values.at(origin);
  p.twice_constant_ = 2 * c0;
  auto one = [&](std::size_t i) { return values.at(origin + 1 + 2 * i); };
  auto two = [&](std::size_t i) { return values.at(origin + 2 + 2 * i); };
  for (std::size_t i = 0; i < n; ++i) {
    const std::int64_t d = design.step[i];
    const std::int64_t twice_curvature = two(i) - 2 * one(i) + c0;
    p.twice_quadratic_[i][i] = twice_curvature;
    p.twice_linear_[i] = 2 * d * (one(i) - c0) - d * twice_curvature;
  }
  std::size_t index = origin + 1 + 2 * n;
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = i + 1; j < n; ++j) {
      const std::int64_t cross = values.at(index++) - one(i) - one(j) + c0;
      p.twice_quadratic_[i][j] = 2 * design.step[i] * design.step[j] * cross;
    }
  }
  // Every point must agree, the check point most of all.
  for (std::size_t k = 0; k < design.points.size(); ++k) {
    auto value = p.at(design.points[k]);
    if (!value || *value != values.at(k)) return std::nullopt;
  }
  return p;
}

std::optional<std::int64_t> SizePolynomial::at(const std::vector<std::int64_t>& sizes) const {
  // 128-bit arithmetic: sizes and coefficients are far below 2^40 for any real tensor.
  __int128 twice = twice_constant_;
  const std::size_t n = anchor_.size();
  for (std::size_t i = 0; i < n; ++i) {
    const __int128 x = static_cast<__int128>(sizes.at(i)) - anchor_[i];
    twice += twice_linear_[i] * x;
    for (std::size_t j = i; j < n; ++j) {
      const __int128 y = static_cast<__int128>(sizes.at(j)) - anchor_[j];
      twice += twice_quadratic_[i][j] * x * y;
    }
  }
  if (twice % 2 != 0) return std::nullopt;
  const __int128 value = twice / 2;
  if (value > INT64_MAX || value < INT64_MIN) return std::nullopt;
  return static_cast<std::int64_t>(value);
}

}  // namespace zenith::capture
