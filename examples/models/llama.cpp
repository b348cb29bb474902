#include "models/llama.h"

#include <c10/util/Exception.h>

#include <cmath>
#include <utility>
#include <vector>

#include "models/mask_value.h"

namespace zenith::models {

namespace {

torch::nn::Linear linear_no_bias(int64_t in, int64_t out) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false));
}

// [..., d] -> [..., d] with halves (a, b) turned into (-b, a): the rotation pairs dimension i with
// i + d/2 (the Hugging Face layout), not adjacent dimensions as in the original RoPE paper.
torch::Tensor rotate_half(const torch::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  torch::Tensor x1 = x.narrow(-1, 0, half);
  torch::Tensor x2 = x.narrow(-1, half, half);
  return torch::cat({-x2, x1}, -1);
}

torch::Tensor apply_rotary(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  return x * cos + rotate_half(x) * sin;
}

// [B, kv_heads, S, D] -> [B, kv_heads * n_rep, S, D], each KV head repeated for the n_rep query heads
// that share it (query head h uses KV head h / n_rep). expand is a view, so only the final reshape
// copies.
torch::Tensor repeat_kv(const torch::Tensor& x, int64_t n_rep) {
  if (n_rep == 1) return x;
  const int64_t b = x.size(0), kv = x.size(1), s = x.size(2), d = x.size(3);
  return x.unsqueeze(2).expand({b, kv, n_rep, s, d}).reshape({b, kv * n_rep, s, d});
}

// The rotary tables (cos, sin) [T, head_dim] for float32 positions [T]. Computed in float32, then
// cast: in half precision the angles of late positions would lose most of their fractional part.
std::tuple<torch::Tensor, torch::Tensor> rotary_tables(const LlamaConfig& config, const torch::Tensor& positions,
                                                       c10::ScalarType dtype) {
  const int64_t head_dim = config.head_dim();
  // reciprocal() rather than `1.0 / ...`, which LibTorch expands to in-place ops (empty_like/fill_/div_).
  torch::Tensor inv_freq =
      torch::pow(config.rope_theta, torch::arange(0, head_dim, 2, positions.options()) / static_cast<double>(head_dim))
          .reciprocal();
  torch::Tensor angles = torch::outer(positions, inv_freq);  // [T, head_dim / 2]
  torch::Tensor emb = torch::cat({angles, angles}, -1);      // [T, head_dim], matching rotate_half
  return {emb.cos().to(dtype), emb.sin().to(dtype)};
}

}  // namespace

LlamaConfig LlamaConfig::small() {
  LlamaConfig c;
  c.vocab_size = 256;
  c.hidden_size = 64;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.intermediate_size = 172;
  c.rope_theta = 10000.0;
  c.rms_norm_eps = 1e-5;
  c.max_position_embeddings = 128;
  return c;
}

LlamaConfig LlamaConfig::tinyllama() { return LlamaConfig{}; }

RMSNormImpl::RMSNormImpl(int64_t dim, double eps) : eps_(eps) {
  weight = register_parameter("weight", torch::ones({dim}));
}

torch::Tensor RMSNormImpl::forward(torch::Tensor x) {
  // Spelled out (pow, mean, add, rsqrt, mul, mul) on purpose: this is the pattern a fusion pass is
  // expected to recognise, so it must not be replaced by a fused kernel here.
  torch::Tensor variance = x.pow(2).mean(-1, /*keepdim=*/true);
  return x * torch::rsqrt(variance + eps_) * weight;
}

LlamaAttentionImpl::LlamaAttentionImpl(const LlamaConfig& config)
    : num_heads_(config.num_heads), num_kv_heads_(config.num_kv_heads), head_dim_(config.head_dim()) {
  q_proj = register_module("q_proj", linear_no_bias(config.hidden_size, num_heads_ * head_dim_));
  k_proj = register_module("k_proj", linear_no_bias(config.hidden_size, num_kv_heads_ * head_dim_));
  v_proj = register_module("v_proj", linear_no_bias(config.hidden_size, num_kv_heads_ * head_dim_));
  o_proj = register_module("o_proj", linear_no_bias(num_heads_ * head_dim_, config.hidden_size));
  if (config.lora) attach_lora(*config.lora);
}

void LlamaAttentionImpl::attach_lora(const LoraOptions& options) {
  TORCH_CHECK(!q_lora, "LlamaAttention: LoRA adapters are attached already");
  // Registered after the projections: the base parameters keep their names and order.
  auto adapter = [&](const char* name, const torch::nn::Linear& projection) {
    return register_module(
        name, LoraAdapter(projection->options.in_features(), projection->options.out_features(), options));
  };
  q_lora = adapter("q_proj_lora", q_proj);
  k_lora = adapter("k_proj_lora", k_proj);
  v_lora = adapter("v_proj_lora", v_proj);
  o_lora = adapter("o_proj_lora", o_proj);
}

torch::Tensor LlamaAttentionImpl::project(torch::nn::Linear& projection, LoraAdapter& adapter,
                                          const torch::Tensor& x) {
  torch::Tensor out = projection->forward(x);
  return adapter ? out + adapter->forward(x) : out;
}

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> LlamaAttentionImpl::rotated_projections(
    const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  const int64_t batch = x.size(0);
  const int64_t seq_len = x.size(1);
  torch::Tensor q = project(q_proj, q_lora, x).view({batch, seq_len, num_heads_, head_dim_}).transpose(1, 2);
  torch::Tensor k = project(k_proj, k_lora, x).view({batch, seq_len, num_kv_heads_, head_dim_}).transpose(1, 2);
  torch::Tensor v = project(v_proj, v_lora, x).view({batch, seq_len, num_kv_heads_, head_dim_}).transpose(1, 2);
  // Rotate before caching: cached keys then already carry their absolute positions and never need
  // to be touched again.
  return {apply_rotary(q, cos, sin), apply_rotary(k, cos, sin), v};
}

torch::Tensor LlamaAttentionImpl::attend(const torch::Tensor& q, const torch::Tensor& keys,
                                         const torch::Tensor& values, const torch::Tensor& mask) {
  const int64_t batch = q.size(0);
  const int64_t seq_len = q.size(2);
  const int64_t n_rep = num_heads_ / num_kv_heads_;
  torch::Tensor repeated_keys = repeat_kv(keys, n_rep);
  torch::Tensor repeated_values = repeat_kv(values, n_rep);
  torch::Tensor scores =
      torch::matmul(q, repeated_keys.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(head_dim_)));
  torch::Tensor probs = torch::softmax(scores + mask, -1);
  torch::Tensor out =
      torch::matmul(probs, repeated_values).transpose(1, 2).reshape({batch, seq_len, num_heads_ * head_dim_});
  return project(o_proj, o_lora, out);
}

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> LlamaAttentionImpl::forward(
    torch::Tensor x, torch::Tensor cos, torch::Tensor sin, torch::Tensor mask, torch::Tensor past_k,
    torch::Tensor past_v) {
  auto [q, k, v] = rotated_projections(x, cos, sin);
  torch::Tensor new_k = torch::cat({past_k, k}, /*dim=*/2);
  torch::Tensor new_v = torch::cat({past_v, v}, /*dim=*/2);
  return {attend(q, new_k, new_v, mask), new_k, new_v};
}

torch::Tensor LlamaAttentionImpl::forward_cached(torch::Tensor x, torch::Tensor cos, torch::Tensor sin,
                                                 torch::Tensor mask, torch::Tensor positions, torch::Tensor cache_k,
                                                 torch::Tensor cache_v) {
  auto [q, k, v] = rotated_projections(x, cos, sin);
  cache_k.index_copy_(/*dim=*/2, positions, k);
  cache_v.index_copy_(/*dim=*/2, positions, v);
  return attend(q, cache_k, cache_v, mask);
}

LlamaMlpImpl::LlamaMlpImpl(const LlamaConfig& config) {
  w1 = register_module("w1", linear_no_bias(config.hidden_size, config.intermediate_size));
  w2 = register_module("w2", linear_no_bias(config.intermediate_size, config.hidden_size));
  w3 = register_module("w3", linear_no_bias(config.hidden_size, config.intermediate_size));
}

torch::Tensor LlamaMlpImpl::forward(torch::Tensor x) {
  return w2->forward(torch::silu(w1->forward(x)) * w3->forward(x));
}

LlamaDecoderLayerImpl::LlamaDecoderLayerImpl(const LlamaConfig& config) {
  attention_norm = register_module("attention_norm", RMSNorm(config.hidden_size, config.rms_norm_eps));
  attention = register_module("attention", LlamaAttention(config));
  mlp_norm = register_module("mlp_norm", RMSNorm(config.hidden_size, config.rms_norm_eps));
  mlp = register_module("mlp", LlamaMlp(config));
}

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> LlamaDecoderLayerImpl::forward(
    torch::Tensor x, torch::Tensor cos, torch::Tensor sin, torch::Tensor mask, torch::Tensor past_k,
    torch::Tensor past_v) {
  // Pre-norm: the residual stream itself is never normalized, only what each sublayer reads.
  auto [attn, new_k, new_v] = attention->forward(attention_norm->forward(x), cos, sin, mask, past_k, past_v);
  x = x + attn;
  x = x + mlp->forward(mlp_norm->forward(x));
  return {x, new_k, new_v};
}

torch::Tensor LlamaDecoderLayerImpl::forward_cached(torch::Tensor x, torch::Tensor cos, torch::Tensor sin,
                                                    torch::Tensor mask, torch::Tensor positions,
                                                    torch::Tensor cache_k, torch::Tensor cache_v) {
  x = x + attention->forward_cached(attention_norm->forward(x), cos, sin, mask, positions, cache_k, cache_v);
  return x + mlp->forward(mlp_norm->forward(x));
}

LlamaImpl::LlamaImpl(LlamaConfig config) : config_(std::move(config)) {
  TORCH_CHECK(config_.num_heads > 0 && config_.hidden_size % config_.num_heads == 0, "Llama: hidden_size ",
              config_.hidden_size, " is not divisible by num_heads ", config_.num_heads);
  TORCH_CHECK(config_.num_kv_heads > 0 && config_.num_heads % config_.num_kv_heads == 0, "Llama: num_heads ",
              config_.num_heads, " is not a multiple of num_kv_heads ", config_.num_kv_heads);
  TORCH_CHECK(config_.head_dim() % 2 == 0, "Llama: rotary embeddings need an even head_dim, got ",
              config_.head_dim());
  TORCH_CHECK(config_.num_layers > 0 && config_.vocab_size > 0 && config_.intermediate_size > 0 &&
                  config_.max_position_embeddings > 0,
              "Llama: sizes must be positive");
  // The layers are built without adapters and get them once every base weight is drawn: the same
  // seed then gives the same base model with LoRA as without.
  LlamaConfig base = config_;
  base.lora.reset();
  embed_tokens =
      register_module("embed_tokens", torch::nn::Embedding(config_.vocab_size, config_.hidden_size));
  for (int64_t i = 0; i < config_.num_layers; ++i) {
    layers->push_back(LlamaDecoderLayer(base));
  }
  register_module("layers", layers);
  norm = register_module("norm", RMSNorm(config_.hidden_size, config_.rms_norm_eps));
  lm_head = register_module("lm_head", linear_no_bias(config_.hidden_size, config_.vocab_size));
  if (config_.lora) {
    const LoraOptions options = *config_.lora;
    config_.lora.reset();  // attach_lora sets it again
    attach_lora(options);
  }
}

void LlamaImpl::attach_lora(const LoraOptions& options) {
  TORCH_CHECK(!config_.lora, "Llama: LoRA adapters are attached already");
  for (int64_t i = 0; i < config_.num_layers; ++i) {
    layers[i]->as<LlamaDecoderLayer>()->attention->attach_lora(options);
  }
  config_.lora = options;
}

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> LlamaImpl::forward(torch::Tensor tokens,
                                                                           torch::Tensor past_k,
                                                                           torch::Tensor past_v) {
  TORCH_CHECK(tokens.dim() == 2, "Llama: expected tokens [B, T], got ", tokens.sizes());
  TORCH_CHECK(past_k.dim() == 5, "Llama: expected past_k [layers, B, kv_heads, past, head_dim], got ",
              past_k.sizes());
  TORCH_CHECK(past_v.sizes() == past_k.sizes(), "Llama: past_v ", past_v.sizes(),
              " must have the shape of past_k ", past_k.sizes());
  const int64_t batch = tokens.size(0);
  const int64_t seq_len = tokens.size(1);
  const int64_t past_len = past_k.size(3);
  TORCH_CHECK(past_k.size(0) == config_.num_layers && past_k.size(1) == batch &&
                  past_k.size(2) == config_.num_kv_heads && past_k.size(4) == config_.head_dim(),
              "Llama: past_k has shape ", past_k.sizes(), ", expected [", config_.num_layers, ", ", batch,
              ", ", config_.num_kv_heads, ", past, ", config_.head_dim(), "]");
  TORCH_CHECK(past_len + seq_len <= config_.max_position_embeddings, "Llama: position ",
              past_len + seq_len - 1, " is beyond max_position_embeddings ", config_.max_position_embeddings);

  torch::Tensor x = embed_tokens->forward(tokens);

  auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(tokens.device());
  auto [cos, sin] = rotary_tables(config_, torch::arange(past_len, past_len + seq_len, f32), x.scalar_type());

  // [T, past + T] additive mask. Query i sits at absolute position past + i and may see keys
  // 0 .. past + i, so the entries with key index j > past + i are masked: the strict upper triangle
  // shifted right by past.
  torch::Tensor mask =
      torch::full({seq_len, past_len + seq_len}, detail::mask_fill_value(x.scalar_type()), x.options())
          .triu(past_len + 1);

  std::vector<torch::Tensor> new_ks, new_vs;
  new_ks.reserve(layers->size());
  new_vs.reserve(layers->size());
  for (int64_t i = 0; i < config_.num_layers; ++i) {
    auto [out, k, v] = layers[i]->as<LlamaDecoderLayer>()->forward(x, cos, sin, mask, past_k.select(0, i),
                                                                   past_v.select(0, i));
    x = out;
    new_ks.push_back(k);
    new_vs.push_back(v);
  }
  torch::Tensor logits = lm_head->forward(norm->forward(x));
  return {logits, torch::stack(new_ks, 0), torch::stack(new_vs, 0)};
}

torch::Tensor LlamaImpl::forward_cached(torch::Tensor tokens, torch::Tensor positions, torch::Tensor cache_k,
                                        torch::Tensor cache_v) {
  TORCH_CHECK(tokens.dim() == 2, "Llama: expected tokens [B, T], got ", tokens.sizes());
  TORCH_CHECK(positions.dim() == 1 && positions.size(0) == tokens.size(1) && positions.scalar_type() == torch::kLong,
              "Llama: expected int64 positions [", tokens.size(1), "] (one per token), got ", positions.scalar_type(),
              " ", positions.sizes());
  TORCH_CHECK(cache_k.dim() == 5 && cache_k.size(0) == config_.num_layers && cache_k.size(1) == tokens.size(0) &&
                  cache_k.size(2) == config_.num_kv_heads && cache_k.size(4) == config_.head_dim(),
              "Llama: cache_k has shape ", cache_k.sizes(), ", expected [", config_.num_layers, ", ", tokens.size(0),
              ", ", config_.num_kv_heads, ", max_len, ", config_.head_dim(), "] (see static_cache)");
  TORCH_CHECK(cache_v.sizes() == cache_k.sizes(), "Llama: cache_v ", cache_v.sizes(),
              " must have the shape of cache_k ", cache_k.sizes());
  TORCH_CHECK(cache_k.size(3) <= config_.max_position_embeddings, "Llama: a cache of ", cache_k.size(3),
              " slots is longer than max_position_embeddings ", config_.max_position_embeddings);
  torch::Tensor x = embed_tokens->forward(tokens);
  TORCH_CHECK(cache_k.scalar_type() == x.scalar_type() && cache_v.scalar_type() == x.scalar_type(),
              "Llama: the caches are ", cache_k.scalar_type(), " and ", cache_v.scalar_type(),
              ", expected the model's dtype ", x.scalar_type());
  auto [cos, sin] = rotary_tables(config_, positions.to(torch::kFloat32), x.scalar_type());
  // [T, max_len] additive mask: query t sees the slots 0 .. positions[t]. Built from the positions'
  // values on the device, never read on the host, so that one plan serves every position.
  const int64_t max_len = cache_k.size(3);
  torch::Tensor slots = torch::arange(max_len, positions.options()).unsqueeze(0);
  torch::Tensor mask = torch::zeros({tokens.size(1), max_len}, x.options())
                           .masked_fill(slots > positions.unsqueeze(1), detail::mask_fill_value(x.scalar_type()));
  for (int64_t i = 0; i < config_.num_layers; ++i) {
    x = layers[i]->as<LlamaDecoderLayer>()->forward_cached(x, cos, sin, mask, positions, cache_k.select(0, i),
                                                           cache_v.select(0, i));
  }
  return lm_head->forward(norm->forward(x));
}

LlamaStaticCacheImpl::LlamaStaticCacheImpl(Llama llama) : model(register_module("model", std::move(llama))) {}

torch::Tensor LlamaStaticCacheImpl::forward(torch::Tensor tokens, torch::Tensor positions, torch::Tensor cache_k,
                                            torch::Tensor cache_v) {
  return model->forward_cached(tokens, positions, cache_k, cache_v);
}

std::tuple<torch::Tensor, torch::Tensor> empty_cache(const LlamaConfig& config, int64_t batch,
                                                     const torch::TensorOptions& options) {
  std::vector<int64_t> shape{config.num_layers, batch, config.num_kv_heads, 0, config.head_dim()};
  return {torch::zeros(shape, options), torch::zeros(shape, options)};
}

std::tuple<torch::Tensor, torch::Tensor> static_cache(const LlamaConfig& config, int64_t batch, int64_t max_len,
                                                      const torch::TensorOptions& options) {
  TORCH_CHECK(max_len > 0 && max_len <= config.max_position_embeddings, "Llama: a static cache needs 1 to ",
              config.max_position_embeddings, " slots (max_position_embeddings), got ", max_len);
  std::vector<int64_t> shape{config.num_layers, batch, config.num_kv_heads, max_len, config.head_dim()};
  return {torch::zeros(shape, options), torch::zeros(shape, options)};
}

}  // namespace zenith::models
