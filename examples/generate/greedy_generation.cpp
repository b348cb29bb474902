#include "greedy_generation.h"

#include <algorithm>
#include <chrono>
#include <sstream>

#include <torch/cuda.h>

namespace zenith::examples {
namespace {

void synchronize(const at::Tensor& on) {
  if (on.is_cuda()) torch::cuda::synchronize(on.device().index());
}

double elapsed_ms(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

Generation generate_greedy(const StepFn& step, const at::Tensor& prompt, std::int64_t new_tokens, at::Tensor cache_k,
                           at::Tensor cache_v, const std::function<void(std::int64_t)>& progress,
                           std::int64_t progress_every) {
  TORCH_CHECK(prompt.dim() == 2 && prompt.size(0) == 1 && prompt.size(1) > 0, "generate: expected a prompt [1, T], got ",
              prompt.sizes());
  TORCH_CHECK(new_tokens > 0, "generate: expected at least one new token, got ", new_tokens);
  TORCH_CHECK(prompt.size(1) + new_tokens <= cache_k.size(3), "generate: ", prompt.size(1), " prompt tokens and ",
              new_tokens, " new ones need ", prompt.size(1) + new_tokens, " cache slots, the cache has ", cache_k.size(3));
  Generation g;
  cache_k.zero_();
  cache_v.zero_();
  const auto longs = prompt.options().dtype(torch::kLong);
  const std::int64_t length = prompt.size(1);
  // Made ahead, so that no call waits for a position.
  const at::Tensor positions = torch::arange(length + new_tokens, longs);
  std::vector<at::Tensor> tokens, logits;
  tokens.reserve(static_cast<std::size_t>(new_tokens));
  logits.reserve(static_cast<std::size_t>(new_tokens));
  synchronize(prompt);
  auto start = std::chrono::steady_clock::now();
  at::Tensor last = step(prompt, positions.narrow(0, 0, length), cache_k, cache_v).select(1, -1);  // [1, vocab]
  synchronize(prompt);
  g.prompt_ms = elapsed_ms(start);
  start = std::chrono::steady_clock::now();
  for (std::int64_t i = 0; i < new_tokens; ++i) {
    logits.push_back(last.to(torch::kFloat));
    at::Tensor next = last.argmax(-1, /*keepdim=*/true);  // [1, 1]
    tokens.push_back(next);
    if (i + 1 < new_tokens) last = step(next, positions.narrow(0, length + i, 1), cache_k, cache_v).select(1, -1);
    if (progress && (i + 1) % progress_every == 0) progress(i + 1);
  }
  synchronize(prompt);
  g.decode_ms = elapsed_ms(start);
  const at::Tensor all = torch::cat(tokens, 1).cpu();
  g.tokens.assign(all.data_ptr<std::int64_t>(), all.data_ptr<std::int64_t>() + all.numel());
  g.logits = torch::cat(logits, 0).cpu();
  return g;
}

std::string Divergence::describe(std::int64_t tokens) const {
  std::ostringstream out;
  if (equal) {
    out << "greedy tokens equal eager's for all " << tokens << " tokens";
  } else {
    out << "first divergence at new token " << index << ": eager " << reference << ", compiled " << other
        << "; max |logit difference| there " << max_logit_difference << ", eager's top-2 margin " << reference_margin;
  }
  return out.str();
}

Divergence compare_generations(const Generation& reference, const Generation& other) {
  Divergence d;
  const auto n = std::min(reference.tokens.size(), other.tokens.size());
  for (std::size_t i = 0; i < n; ++i) {
    if (reference.tokens[i] == other.tokens[i]) continue;
    d.equal = false;
    d.index = static_cast<std::int64_t>(i);
    d.reference = reference.tokens[i];
    d.other = other.tokens[i];
    const auto row = static_cast<std::int64_t>(i);
    const at::Tensor want = reference.logits[row], got = other.logits[row];
    d.max_logit_difference = (got - want).abs().max().item<double>();
    const auto top2 = std::get<0>(want.topk(2));
    d.reference_margin = (top2[0] - top2[1]).item<double>();
    return d;
  }
  d.equal = reference.tokens.size() == other.tokens.size();
  if (!d.equal) d.index = static_cast<std::int64_t>(n);
  return d;
}

}  // namespace zenith::examples
