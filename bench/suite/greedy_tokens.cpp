#include "greedy_tokens.h"

#include <algorithm>
#include <tuple>

namespace zenith::bench {

void compare_greedy(const Greedy& got, const Greedy& eager, Result& r) {
  const std::size_t count = std::min(got.tokens.size(), eager.tokens.size());
  std::size_t same = 0;
  while (same < count && got.tokens[same] == eager.tokens[same]) ++same;
  r.extra["greedy_tokens"] = count;
  r.extra["greedy_tokens_matched"] = same;
  if (same == count) return;
  const auto best_two = std::get<0>(eager.logits[same].topk(2));
  r.extra["greedy_divergence_margin"] = (best_two[0] - best_two[1]).item<double>();
  r.extra["greedy_divergence_logit_diff"] = (got.logits[same] - eager.logits[same]).abs().max().item<double>();
}

}  // namespace zenith::bench
