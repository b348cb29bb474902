// The sweep's stall check (bench/suite/similar_lengths.h) on steps written by hand.
#include <gtest/gtest.h>

#include <stdexcept>

#include "similar_lengths.h"

namespace zenith::bench {
namespace {

TEST(SimilarLengths, AStallStandsOutAgainstTheMedianOfItsNeighbours) {
  // Latency growing with the length, one stalled step at 500 (the median of 450..550 is 1.0).
  const std::vector<double> lengths{100, 460, 480, 500, 520, 540, 1000};
  const std::vector<double> ms{0.2, 1.0, 1.0, 3.0, 1.0, 1.1, 2.0};
  const auto slowest = slowest_against_similar_lengths(lengths, ms);
  EXPECT_EQ(slowest.index, 3u);
  EXPECT_DOUBLE_EQ(slowest.ratio, 3.0);
}

TEST(SimilarLengths, OnlyLengthsWithinATenthCount) {
  // 112 is more than a tenth of either length away from 100: each step is alone at its length,
  // so neither is a stall, however far apart their times are.
  const auto slowest = slowest_against_similar_lengths({100, 112}, {1.0, 5.0});
  EXPECT_DOUBLE_EQ(slowest.ratio, 1.0);
  // 110 is within a tenth of 100 (and of itself): the median of {5, 1} is 3, and 5 is 1.67 times it.
  const auto near = slowest_against_similar_lengths({110, 100}, {5.0, 1.0});
  EXPECT_EQ(near.index, 0u);
  EXPECT_NEAR(near.ratio, 5.0 / 3.0, 1e-12);
}

TEST(SimilarLengths, EmptyAndMismatchedSweeps) {
  EXPECT_DOUBLE_EQ(slowest_against_similar_lengths({}, {}).ratio, 0.0);
  EXPECT_THROW(slowest_against_similar_lengths({100, 200}, {1.0}), std::invalid_argument);
}

}  // namespace
}  // namespace zenith::bench
