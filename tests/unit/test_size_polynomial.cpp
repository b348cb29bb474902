// Size polynomials and probe designs: what a symbolic plan may assume about how an integer of a
// plan follows the symbolic sizes, and what it must refuse.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <random>
#include <set>
#include <string>

#include "runtime/size_polynomial.h"

namespace zenith::capture {
namespace {

using Sizes = std::vector<std::int64_t>;

std::optional<SizePolynomial> fit_function(const ProbeDesign& design, const std::function<std::int64_t(const Sizes&)>& f) {
  std::vector<std::int64_t> values;
  for (const auto& point : design.points) values.push_back(f(point));
  return SizePolynomial::fit(design, values);
}

// The fitted polynomial must give f's value at sizes it never saw.
void expect_matches(const SizePolynomial& p, const std::function<std::int64_t(const Sizes&)>& f, std::size_t dims,
                    unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::int64_t> size(2, 5000);
  for (int trial = 0; trial < 200; ++trial) {
    Sizes sizes;
    for (std::size_t d = 0; d < dims; ++d) sizes.push_back(size(rng));
    auto value = p.at(sizes);
    ASSERT_TRUE(value.has_value());
    EXPECT_EQ(*value, f(sizes)) << "at " << sizes[0];
  }
}

TEST(ProbeDesign, PointsStayAtTwoOrMoreAndAreDistinct) {
  for (std::int64_t base : {2, 3, 4, 5, 7, 8, 100, 1000}) {
    auto design = ProbeDesign::around({base});
    ASSERT_EQ(design.points.size(), 4u);
    std::set<std::int64_t> seen;
    for (const auto& point : design.points) {
      EXPECT_GE(point[0], 2) << "base " << base;
      seen.insert(point[0]);
    }
    EXPECT_EQ(seen.size(), 4u) << "base " << base;
    EXPECT_EQ(design.points[0][0], base);
  }
  // Two dimensions: base, two per dimension, one for the pair, one check.
  EXPECT_EQ(ProbeDesign::around({32, 128}).points.size(), 7u);
  EXPECT_EQ(ProbeDesign::around({2, 3, 4}).points.size(), 11u);
}

// When every size is ProbeDesign::kFarSize or more, the probes run at about a quarter of each
// (their memory a quarter of the call's per size) and the call's own sizes are the check point.
// With any size below, the probes stay next to the base.
TEST(ProbeDesign, LargeSizesAreProbedAtAQuarterAndCheckedAtTheBase) {
  for (const Sizes& base : {Sizes{32}, Sizes{100}, Sizes{1000}, Sizes{4096}, Sizes{32, 32}, Sizes{40, 1000}}) {
    auto design = ProbeDesign::around(base);
    ASSERT_EQ(design.anchor_index(), 1u) << base[0];
    EXPECT_EQ(design.points[0], base);
    std::set<Sizes> seen(design.points.begin(), design.points.end());
    EXPECT_EQ(seen.size(), design.points.size()) << "distinct points, base " << base[0];
    for (std::size_t d = 0; d < base.size(); ++d) {
      EXPECT_EQ(design.anchor[d], base[d] / 4);
      for (std::size_t k = 1; k < design.points.size(); ++k) {
        EXPECT_LE(design.points[k][d], base[d] / 4) << "base " << base[0] << ", point " << k;
        EXPECT_GE(design.points[k][d], 6) << "base " << base[0] << ", point " << k;
      }
    }
  }
  for (const Sizes& base : {Sizes{31}, Sizes{2, 3, 4}, Sizes{8, 31}, Sizes{4, 600}, Sizes{31, 1000}}) {
    auto design = ProbeDesign::around(base);
    EXPECT_EQ(design.anchor_index(), 0u);
    EXPECT_EQ(design.anchor, base);
    EXPECT_EQ(design.points[0], base);
  }
}

// The far design's wider spread (a quarter of the size to the size) must not trade one kind of
// wrong plan for another: wherever it accepts a polynomial that is wrong somewhere (roundings,
// floors and clamps look polynomial to a few points), the near design at the same base accepts a
// wrong one too. Over seeded bases of one and two large sizes and a family of such integers; a
// polynomial is wrong when it differs at one of 80 random sizes from 2 to 1200.
TEST(ProbeDesign, TheFarDesignAcceptsNoWrongPolynomialTheNearOneRefuses) {
  using F = std::function<std::int64_t(const Sizes&)>;
  std::vector<std::pair<std::string, F>> integers;
  for (std::int64_t k : {2, 3, 7, 8, 16, 64, 128, 512}) {
    const auto ks = std::to_string(k);
    integers.emplace_back("ceil(B L / " + ks + ") * " + ks,
                          [k](const Sizes& s) { return (s[0] * s.back() + k - 1) / k * k; });
    integers.emplace_back("floor(B L / " + ks + ")", [k](const Sizes& s) { return s[0] * s.back() / k; });
    integers.emplace_back("B floor(L / " + ks + ")", [k](const Sizes& s) { return s[0] * (s.back() / k); });
    integers.emplace_back("min(B, " + ks + ")", [k](const Sizes& s) { return std::min(s[0], k); });
    integers.emplace_back("max(L, " + ks + ")", [k](const Sizes& s) { return std::max(s.back(), k); });
    integers.emplace_back("ceil((B + L) / " + ks + ")", [k](const Sizes& s) { return (s[0] + s.back() + k - 1) / k; });
  }
  std::mt19937 rng(17);
  std::uniform_int_distribution<std::int64_t> large(ProbeDesign::kFarSize, 1000), anywhere(2, 1200);
  std::vector<Sizes> probes_of_truth;
  for (int i = 0; i < 80; ++i) probes_of_truth.push_back({anywhere(rng), anywhere(rng)});
  auto wrong_somewhere = [&](const std::optional<SizePolynomial>& p, const F& f, std::size_t dims) {
    if (!p) return false;
    for (const auto& sizes : probes_of_truth) {
      const Sizes at(sizes.begin(), sizes.begin() + static_cast<std::ptrdiff_t>(dims));
      auto value = p->at(at);
      if (value && *value != f(at)) return true;
    }
    return false;
  };
  int far_right_near_wrong = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const Sizes base = trial % 2 == 0 ? Sizes{large(rng)} : Sizes{large(rng), large(rng)};
    const auto far = ProbeDesign::far(base), near = ProbeDesign::near(base);
    for (const auto& [name, f] : integers) {
      const bool far_wrong = wrong_somewhere(fit_function(far, f), f, base.size());
      const bool near_wrong = wrong_somewhere(fit_function(near, f), f, base.size());
      EXPECT_FALSE(far_wrong && !near_wrong)
          << name << " at base " << base[0] << (base.size() > 1 ? " x " + std::to_string(base[1]) : "");
      far_right_near_wrong += near_wrong && !far_wrong;
    }
  }
  // And the spread pays: some integers the near design gets wrong, the far one refuses.
  EXPECT_GT(far_right_near_wrong, 0);
}

TEST(SizePolynomial, FitsWhatTransformersComputeFromOneLength) {
  auto design = ProbeDesign::around({128});
  std::vector<std::pair<const char*, std::function<std::int64_t(const Sizes&)>>> cases = {
      {"L", [](const Sizes& s) { return s[0]; }},
      {"L - 1", [](const Sizes& s) { return s[0] - 1; }},
      {"768 L", [](const Sizes& s) { return 768 * s[0]; }},
      {"12 L^2 (attention strides)", [](const Sizes& s) { return 12 * s[0] * s[0]; }},
      {"L (L - 1) / 2", [](const Sizes& s) { return s[0] * (s[0] - 1) / 2; }},
      {"constant 64", [](const Sizes&) { return std::int64_t{64}; }},
  };
  for (const auto& [name, f] : cases) {
    auto p = fit_function(design, f);
    ASSERT_TRUE(p.has_value()) << name;
    expect_matches(*p, f, 1, 7);
  }
}

TEST(SizePolynomial, FitsProductsOfTwoDimensions) {
  for (const Sizes& base : {Sizes{32, 128}, Sizes{2, 3}, Sizes{4, 600}, Sizes{40, 1000}, Sizes{9, 17}}) {
    auto design = ProbeDesign::around(base);
    auto batch_times_length = [](const Sizes& s) { return s[0] * s[1] * 1024; };
    auto p = fit_function(design, batch_times_length);
    ASSERT_TRUE(p.has_value());
    expect_matches(*p, batch_times_length, 2, 11);
    auto past_plus_length = [](const Sizes& s) { return s[0] + s[1] + 1; };
    auto q = fit_function(design, past_plus_length);
    ASSERT_TRUE(q.has_value());
    expect_matches(*q, past_plus_length, 2, 13);
  }
}

TEST(SizePolynomial, RefusesWhatNoQuadraticFollows) {
  for (std::int64_t base : {3, 6, 31, 32, 33, 100, 101, 1000}) {
    auto design = ProbeDesign::around({base});
    EXPECT_FALSE(fit_function(design, [](const Sizes& s) { return s[0] / 2; })) << "floor(L/2) at " << base;
    // Rounding up to a multiple wider than the probes' spread looks constant to them
    // (docs/dynamic-shapes.md); the spread at these bases covers a multiple of 8.
    if (base >= 6) {
      EXPECT_FALSE(fit_function(design, [](const Sizes& s) { return (s[0] + 7) / 8 * 8; })) << "round up at " << base;
    }
    EXPECT_FALSE(fit_function(design, [](const Sizes& s) { return s[0] * s[0] * s[0]; })) << "L^3 at " << base;
  }
  // Batch times heads times length squared: degree 3 over two dimensions, with the near design
  // (4 x 100, 4 x 20) and with the far one (64 x 512).
  for (const Sizes& base : {Sizes{4, 100}, Sizes{4, 20}, Sizes{64, 512}}) {
    EXPECT_FALSE(fit_function(ProbeDesign::around(base), [](const Sizes& s) { return s[0] * s[1] * s[1]; }))
        << base[0] << " x " << base[1];
  }
  // A small batch beside a long length keeps the near design: anchored five past the batch while
  // the length moved to a quarter, every point's product would round alike.
  EXPECT_FALSE(fit_function(ProbeDesign::around({20, 100}), [](const Sizes& s) { return (s[0] + 15) / 16 * 16; }));
  EXPECT_FALSE(fit_function(ProbeDesign::around({2, 60}), [](const Sizes& s) { return (s[0] * s[1] + 63) / 64 * 64; }));
}

TEST(SizePolynomial, OverflowIsNoValue) {
  auto design = ProbeDesign::around({128});
  auto p = fit_function(design, [](const Sizes& s) { return s[0] * s[0] * 1000; });
  ASSERT_TRUE(p.has_value());
  EXPECT_FALSE(p->at({std::int64_t{1} << 40}).has_value());
}

}  // namespace
}  // namespace zenith::capture
