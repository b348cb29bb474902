// The decoder row's greedy comparison (bench/suite/greedy_tokens.h): tokens before the first that
// differs, and there eager's top-two gap and the mode's largest logit difference, from logits made
// here with known values.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "greedy_tokens.h"

namespace zenith::bench {
namespace {

// Three tokens over a vocabulary of four; each step's logits put `token` first by `gap`.
Greedy generation(const std::vector<std::int64_t>& tokens, double gap) {
  Greedy g;
  for (auto token : tokens) {
    auto logits = at::zeros({4});
    logits[token] = gap;
    g.tokens.push_back(token);
    g.logits.push_back(logits);
  }
  return g;
}

TEST(GreedyTokens, TheSameTokensMatchEveryOne) {
  const auto eager = generation({1, 2, 3}, 2.0);
  Result r;
  compare_greedy(generation({1, 2, 3}, 2.5), eager, r);
  EXPECT_EQ(r.extra["greedy_tokens"], 3);
  EXPECT_EQ(r.extra["greedy_tokens_matched"], 3);
  EXPECT_FALSE(r.extra.contains("greedy_divergence_margin"));
}

TEST(GreedyTokens, TheFirstDifferenceIsReportedWithEagersGapAndTheLogitDifference) {
  auto eager = generation({1, 2, 3}, 2.0);
  eager.logits[1][0] = 1.5;  // eager's second and first best at the second token: 2.0 and 1.5
  auto got = generation({1, 0, 3}, 2.0);
  got.logits[1] = eager.logits[1].clone();
  got.logits[1][0] = 2.25;  // the mode's logit for token 0 is 0.75 above eager's
  Result r;
  compare_greedy(got, eager, r);
  EXPECT_EQ(r.extra["greedy_tokens"], 3);
  EXPECT_EQ(r.extra["greedy_tokens_matched"], 1);
  // Exact in float32: 2.0 - 1.5 and 2.25 - 1.5.
  EXPECT_DOUBLE_EQ(r.extra["greedy_divergence_margin"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(r.extra["greedy_divergence_logit_diff"].get<double>(), 0.75);
}

TEST(GreedyTokens, OnlyTheTokensBothGeneratedCount) {
  Result r;
  compare_greedy(generation({1, 2}, 1.0), generation({1, 2, 3}, 1.0), r);
  EXPECT_EQ(r.extra["greedy_tokens"], 2);
  EXPECT_EQ(r.extra["greedy_tokens_matched"], 2);
}

}  // namespace
}  // namespace zenith::bench
