#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <optional>
#include <tuple>

#include "models/lora.h"

namespace zenith::models {

struct LlamaConfig {
  int64_t vocab_size = 32000;
  int64_t hidden_size = 2048;
  int64_t num_layers = 22;
  int64_t num_heads = 32;
  int64_t num_kv_heads = 4;  // fewer than num_heads: grouped-query attention
  int64_t intermediate_size = 5632;
  double rope_theta = 10000.0;
  double rms_norm_eps = 1e-5;
  int64_t max_position_embeddings = 2048;
  // LoRA adapters on the attention projections q, k, v and o when set; none (the plain model) by
  // default. The adapters' B starts at zero, so enabling them leaves the initial output unchanged,
  // and Llama draws them after every base weight, so a seed gives the same base weights either way.
  std::optional<LoraOptions> lora;

  int64_t head_dim() const { return hidden_size / num_heads; }

  static LlamaConfig small();
  static LlamaConfig tinyllama();  // TinyLlama-1.1B
};

class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(int64_t dim, double eps);

  // x: [..., dim] -> [..., dim], each row scaled to unit root-mean-square, then by weight.
  torch::Tensor forward(torch::Tensor x);

  torch::Tensor weight;

 private:
  double eps_;
};
TORCH_MODULE(RMSNorm);

class LlamaAttentionImpl : public torch::nn::Module {
 public:
  explicit LlamaAttentionImpl(const LlamaConfig& config);

  // x: [B, T, H]; cos, sin: [T, head_dim]; mask: additive, broadcastable to [B, heads, T, past + T];
  // past_k, past_v: [B, kv_heads, past, head_dim]
  // -> (output [B, T, H], new_k, new_v [B, kv_heads, past + T, head_dim])
  std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> forward(torch::Tensor x, torch::Tensor cos,
                                                                  torch::Tensor sin, torch::Tensor mask,
                                                                  torch::Tensor past_k, torch::Tensor past_v);

  // The static-cache form. positions: int64 [T], the absolute positions of x's T tokens (the same
  // for every batch row); cache_k, cache_v: [B, kv_heads, max_len, head_dim], written in place at
  // `positions` (index_copy_); mask: additive, broadcastable to [B, heads, T, max_len], hiding
  // every slot not yet written as well as the future. Attends over all max_len slots, so the sizes
  // of a decode step do not change from token to token. -> output [B, T, H].
  torch::Tensor forward_cached(torch::Tensor x, torch::Tensor cos, torch::Tensor sin, torch::Tensor mask,
                               torch::Tensor positions, torch::Tensor cache_k, torch::Tensor cache_v);

  torch::nn::Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  // Adds LoRA adapters to q_proj, k_proj, v_proj and o_proj (the constructor does when
  // LlamaConfig::lora is set). Throws when they are attached already.
  void attach_lora(const LoraOptions& options);

  // Added to the matching projection's output; empty holders until attach_lora.
  LoraAdapter q_lora{nullptr}, k_lora{nullptr}, v_lora{nullptr}, o_lora{nullptr};

 private:
  // projection(x), plus the adapter's term when there is one.
  torch::Tensor project(torch::nn::Linear& projection, LoraAdapter& adapter, const torch::Tensor& x);
  // x [B, T, H] -> q [B, heads, T, D], k and v [B, kv_heads, T, D]; q and k rotated.
  std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> rotated_projections(const torch::Tensor& x,
                                                                              const torch::Tensor& cos,
                                                                              const torch::Tensor& sin);
  // softmax(q keys^T / sqrt(D) + mask) values, projected: -> [B, T, H].
  torch::Tensor attend(const torch::Tensor& q, const torch::Tensor& keys, const torch::Tensor& values,
                       const torch::Tensor& mask);

  int64_t num_heads_;
  int64_t num_kv_heads_;
  int64_t head_dim_;
};
TORCH_MODULE(LlamaAttention);

class LlamaMlpImpl : public torch::nn::Module {
 public:
  explicit LlamaMlpImpl(const LlamaConfig& config);

  // x: [..., H] -> [..., H], computing w2(silu(w1 x) * w3 x).
  torch::Tensor forward(torch::Tensor x);

  torch::nn::Linear w1{nullptr}, w2{nullptr}, w3{nullptr};
};
TORCH_MODULE(LlamaMlp);

class LlamaDecoderLayerImpl : public torch::nn::Module {
 public:
  explicit LlamaDecoderLayerImpl(const LlamaConfig& config);

  // Arguments and results as for LlamaAttention.
  std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> forward(torch::Tensor x, torch::Tensor cos,
                                                                  torch::Tensor sin, torch::Tensor mask,
                                                                  torch::Tensor past_k, torch::Tensor past_v);
  // As LlamaAttention::forward_cached.
  torch::Tensor forward_cached(torch::Tensor x, torch::Tensor cos, torch::Tensor sin, torch::Tensor mask,
                               torch::Tensor positions, torch::Tensor cache_k, torch::Tensor cache_v);

  RMSNorm attention_norm{nullptr};
  LlamaAttention attention{nullptr};
  RMSNorm mlp_norm{nullptr};
  LlamaMlp mlp{nullptr};
};
TORCH_MODULE(LlamaDecoderLayer);

class LlamaImpl : public torch::nn::Module {
 public:
  explicit LlamaImpl(LlamaConfig config);

  // tokens: int64 [B, T]; past_k, past_v: float [num_layers, B, kv_heads, past, head_dim], past may be 0
  // -> (logits [B, T, vocab], new_k, new_v [num_layers, B, kv_heads, past + T, head_dim]).
  // The new tokens sit at positions past .. past + T - 1.
  std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> forward(torch::Tensor tokens, torch::Tensor past_k,
                                                                  torch::Tensor past_v);

  // The static-cache form, as generation code with a preallocated cache runs it. tokens: int64
  // [B, T]; positions: int64 [T], their absolute positions; cache_k, cache_v: [num_layers, B,
  // kv_heads, max_len, head_dim] of the model's dtype, allocated once (static_cache) and written in
  // place at `positions`. Slots not yet written must hold finite values (static_cache zeroes them):
  // they are masked, and a masked NaN would still reach the output through the product with the
  // values. -> logits [B, T, vocab]. A position at or beyond max_len is an error of index_copy_.
  torch::Tensor forward_cached(torch::Tensor tokens, torch::Tensor positions, torch::Tensor cache_k,
                               torch::Tensor cache_v);

  const LlamaConfig& config() const { return config_; }

  // Adds LoRA adapters to the attention projections of every layer and records them in config()
  // (the constructor does when LlamaConfig::lora is set; call it yourself after loading base
  // weights into a plain model). Throws when they are attached already.
  void attach_lora(const LoraOptions& options);

  torch::nn::Embedding embed_tokens{nullptr};
  torch::nn::ModuleList layers;
  RMSNorm norm{nullptr};
  torch::nn::Linear lm_head{nullptr};

 private:
  LlamaConfig config_;
};
TORCH_MODULE(Llama);

// A Llama whose forward is its static-cache form (LlamaImpl::forward_cached), so that
// zenith::compile, which compiles a module's forward, compiles the decode step. Holds the model
// as its submodule "model": parameters are shared, not copied.
class LlamaStaticCacheImpl : public torch::nn::Module {
 public:
  explicit LlamaStaticCacheImpl(Llama model);

  // As LlamaImpl::forward_cached.
  torch::Tensor forward(torch::Tensor tokens, torch::Tensor positions, torch::Tensor cache_k, torch::Tensor cache_v);

  Llama model{nullptr};
};
TORCH_MODULE(LlamaStaticCache);

// Zero-length (past = 0) key and value caches for the first forward call.
std::tuple<torch::Tensor, torch::Tensor> empty_cache(const LlamaConfig& config, int64_t batch,
                                                     const torch::TensorOptions& options = torch::kFloat32);

// Zeroed key and value caches of max_len slots for LlamaImpl::forward_cached:
// [num_layers, batch, kv_heads, max_len, head_dim] each.
std::tuple<torch::Tensor, torch::Tensor> static_cache(const LlamaConfig& config, int64_t batch, int64_t max_len,
                                                      const torch::TensorOptions& options = torch::kFloat32);

}  // namespace zenith::models
