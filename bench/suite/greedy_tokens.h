// A greedy generation's tokens, compared with eager's: the decoder's benchmark row says how many
// of a mode's greedy tokens are eager's and, where they part, whether rounding could explain it.
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/ATen.h>

#include "result.h"

namespace zenith::bench {

/// Tokens of a greedy generation (each the argmax of the last position's logits, fed back) and
/// the logits each was chosen from. Rounding may flip a near tie, so a mode's are compared with
/// eager's rather than required equal.
struct Greedy {
  std::vector<std::int64_t> tokens;
  std::vector<at::Tensor> logits;  ///< the last position's, float32 on the CPU, one per token
};

/// Sets in `r.extra`: "greedy_tokens" (how many both generated), "greedy_tokens_matched" (those
/// before the first that differs) and, where one differs, "greedy_divergence_margin" (eager's gap
/// between its two best logits there) and "greedy_divergence_logit_diff" (the largest difference
/// of the mode's logits from eager's there, where both had seen the same tokens). A flip by
/// rounding needs the difference to reach half the gap.
void compare_greedy(const Greedy& got, const Greedy& eager, Result& r);

}  // namespace zenith::bench
