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
  for (const Sizes& base : {Sizes{32, 128}, Sizes{2, 3}, Sizes{4, 600}}) {
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
  for (std::int64_t base : {3, 6, 100, 101, 1000}) {
    auto design = ProbeDesign::around({base});
    EXPECT_FALSE(fit_function(design, [](const Sizes& s) { return s[0] / 2; })) << "floor(L/2) at " << base;
    // Rounding up to a multiple wider than the probes' spread looks constant to them
    // (docs/dynamic-shapes.md); the spread at these bases covers a multiple of 8.
    if (base >= 6) {
      EXPECT_FALSE(fit_function(design, [](const Sizes& s) { return (s[0] + 7) / 8 * 8; })) << "round up at " << base;
    }
    EXPECT_FALSE(fit_function(design, [](const Sizes& s) { return s[0] * s[0] * s[0]; })) << "L^3 at " << base;
  }
  // Batch times heads times length squared: degree 3 over two dimensions.
  EXPECT_FALSE(fit_function(ProbeDesign::around({4, 100}), [](const Sizes& s) { return s[0] * s[1] * s[1]; }));
}

TEST(SizePolynomial, OverflowIsNoValue) {
  auto design = ProbeDesign::around({128});
  auto p = fit_function(design, [](const Sizes& s) { return s[0] * s[0] * 1000; });
  ASSERT_TRUE(p.has_value());
  EXPECT_FALSE(p->at({std::int64_t{1} << 40}).has_value());
}

}  // namespace
}  // namespace zenith::capture
