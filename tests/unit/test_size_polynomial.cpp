// Size polynomials and probe designs: what a symbolic plan may assume about how an integer of a
// plan follows the symbolic sizes, and what it must refuse.
#include <gtest/gtest.h>

#include <functional>
#include <set>
#include <random>

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

// From a size of ProbeDesign::kFarSize on, the probes run at about a quarter of it (their memory a
// quarter of the call's) and the call's own sizes are the check point; smaller sizes moved by five,
// so that the check moves every dimension. Below, the probes stay next to the base.
TEST(ProbeDesign, LargeSizesAreProbedAtAQuarterAndCheckedAtTheBase) {
  for (std::int64_t base : {32, 100, 1000, 4096}) {
    auto design = ProbeDesign::around({base});
    ASSERT_EQ(design.anchor_index, 1u) << "base " << base;
    EXPECT_EQ(design.points[0][0], base);
    EXPECT_EQ(design.anchor[0], base / 4);
    for (std::size_t k = 1; k < design.points.size(); ++k) {
      EXPECT_LE(design.points[k][0], base / 4) << "base " << base << ", point " << k;
      EXPECT_GE(design.points[k][0], 2) << "base " << base << ", point " << k;
    }
  }
  auto mixed = ProbeDesign::around({4, 600});
  ASSERT_EQ(mixed.anchor_index, 1u);
  EXPECT_EQ(mixed.anchor, (Sizes{9, 150}));
  for (std::size_t k = 1; k < mixed.points.size(); ++k) {
    EXPECT_NE(mixed.points[k][0], 4) << "the check (the base) moves every dimension, point " << k;
    EXPECT_LE(mixed.points[k][1], 150) << "point " << k;
  }
  for (const Sizes& base : {Sizes{31}, Sizes{2, 3, 4}, Sizes{8, 31}}) {
    auto design = ProbeDesign::around(base);
    EXPECT_EQ(design.anchor_index, 0u);
    EXPECT_EQ(design.anchor, base);
    EXPECT_EQ(design.points[0], base);
  }
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
  // Batch times heads times length squared: degree 3 over two dimensions, with the near design and
  // with the far one (where the check, the base, must move the small dimension too).
  for (const Sizes& base : {Sizes{4, 100}, Sizes{4, 20}, Sizes{64, 512}}) {
    EXPECT_FALSE(fit_function(ProbeDesign::around(base), [](const Sizes& s) { return s[0] * s[1] * s[1]; }))
        << base[0] << " x " << base[1];
  }
}

TEST(SizePolynomial, OverflowIsNoValue) {
  auto design = ProbeDesign::around({128});
  auto p = fit_function(design, [](const Sizes& s) { return s[0] * s[0] * 1000; });
  ASSERT_TRUE(p.has_value());
  EXPECT_FALSE(p->at({std::int64_t{1} << 40}).has_value());
}

}  // namespace
}  // namespace zenith::capture
