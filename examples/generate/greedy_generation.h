// Greedy generation with a static KV cache, the loop examples/generate runs once eagerly and once
// through Zenith: the prompt in one call, then one token per call, each the argmax of the last
// logits. The loop stays on the device (the next token is fed as a tensor, never read on the host)
// until the end, as a fast generation loop must.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace zenith::examples {

/// One forward call of the static-cache form (LlamaStaticCache): tokens [1, T], positions [T],
/// cache_k, cache_v written in place -> logits [1, T, vocab].
using StepFn = std::function<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&)>;

/// A generation's tokens and logits, and how long it took.
struct Generation {
  std::vector<std::int64_t> tokens;  ///< the new tokens, in order
  at::Tensor logits;                 ///< [new tokens, vocab] float32: the logits each token was chosen from
  double prompt_ms = 0;              ///< the prompt's call, the device synchronized after it
  double decode_ms = 0;              ///< every later call, the device synchronized at the end
};

/// Generates `new_tokens` tokens after `prompt` (int64 [1, T] on the caches' device) into the
/// zeroed caches; `progress(done)` is called every `progress_every` tokens when set.
Generation generate_greedy(const StepFn& step, const at::Tensor& prompt, std::int64_t new_tokens, at::Tensor cache_k,
                           at::Tensor cache_v, const std::function<void(std::int64_t)>& progress = nullptr,
                           std::int64_t progress_every = 32);

/// How two generations of the same prompt compare: equal, or where they part.
struct Divergence {
  bool equal = true;
  std::int64_t index = -1;         ///< the first token that differs
  std::int64_t reference = -1;     ///< the reference's token there, and the other's
  std::int64_t other = -1;
  double max_logit_difference = 0; ///< max |logits - reference logits| at that token
  double reference_margin = 0;     ///< the reference's top logit minus its second there (a near-tie is small)

  /// One line: "equal for all N tokens" or where and by how much they part.
  std::string describe(std::int64_t tokens) const;
};

/// Where `other` first departs from `reference`.
Divergence compare_generations(const Generation& reference, const Generation& other);

}  // namespace zenith::examples
