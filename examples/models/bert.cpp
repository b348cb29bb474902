#include "models/bert.h"

#include <c10/util/Exception.h>

#include <cmath>
#include <utility>

#include "models/mask_value.h"

namespace zenith::models {

BertConfig BertConfig::small() {
  BertConfig c;
  c.vocab_size = 128;
  c.hidden_size = 32;
  c.num_layers = 2;
  c.num_heads = 4;
  c.intermediate_size = 64;
  c.max_position_embeddings = 64;
  c.type_vocab_size = 2;
  return c;
}

BertConfig BertConfig::base() { return BertConfig{}; }

BertEmbeddingsImpl::BertEmbeddingsImpl(const BertConfig& config)
    : max_positions_(config.max_position_embeddings) {
  word_embeddings =
      register_module("word_embeddings", torch::nn::Embedding(config.vocab_size, config.hidden_size));
  position_embeddings = register_module(
      "position_embeddings", torch::nn::Embedding(config.max_position_embeddings, config.hidden_size));
  token_type_embeddings = register_module("token_type_embeddings",
                                          torch::nn::Embedding(config.type_vocab_size, config.hidden_size));
  layer_norm = register_module(
      "layer_norm",
      torch::nn::LayerNorm(torch::nn::LayerNormOptions({config.hidden_size}).eps(config.layer_norm_eps)));
  dropout = register_module("dropout", torch::nn::Dropout(config.dropout));
}

torch::Tensor BertEmbeddingsImpl::forward(torch::Tensor input_ids) {
  const int64_t seq_len = input_ids.size(1);
  TORCH_CHECK(seq_len <= max_positions_, "Bert: sequence length ", seq_len,
              " exceeds max_position_embeddings ", max_positions_);
  // Built here rather than stored as a buffer so it lands on the input's device and follows its length.
  torch::Tensor position_ids =
      torch::arange(seq_len, torch::TensorOptions().dtype(torch::kLong).device(input_ids.device()))
          .unsqueeze(0);
  torch::Tensor token_type_ids = torch::zeros_like(input_ids);
  torch::Tensor x = word_embeddings->forward(input_ids) + position_embeddings->forward(position_ids) +
                    token_type_embeddings->forward(token_type_ids);
  return dropout->forward(layer_norm->forward(x));
}

BertSelfAttentionImpl::BertSelfAttentionImpl(const BertConfig& config)
    : num_heads_(config.num_heads), head_dim_(config.head_dim()) {
  query = register_module("query", torch::nn::Linear(config.hidden_size, config.hidden_size));
  key = register_module("key", torch::nn::Linear(config.hidden_size, config.hidden_size));
  value = register_module("value", torch::nn::Linear(config.hidden_size, config.hidden_size));
  dropout = register_module("dropout", torch::nn::Dropout(config.dropout));
}

torch::Tensor BertSelfAttentionImpl::forward(torch::Tensor x, torch::Tensor additive_mask) {
  const int64_t batch = x.size(0);
  const int64_t seq_len = x.size(1);
  // [B, T, H] -> [B, heads, T, head_dim] so one batched matmul covers every head.
  auto split_heads = [&](const torch::Tensor& t) {
    return t.view({batch, seq_len, num_heads_, head_dim_}).transpose(1, 2);
  };
  torch::Tensor q = split_heads(query->forward(x));
  torch::Tensor k = split_heads(key->forward(x));
  torch::Tensor v = split_heads(value->forward(x));

  // Scaling keeps the logits' variance independent of head_dim, so softmax does not saturate.
  torch::Tensor scores =
      torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(head_dim_)));
  scores = scores + additive_mask;
  torch::Tensor probs = dropout->forward(torch::softmax(scores, -1));
  torch::Tensor context = torch::matmul(probs, v);
  return context.transpose(1, 2).reshape({batch, seq_len, num_heads_ * head_dim_});
}

BertLayerImpl::BertLayerImpl(const BertConfig& config) {
  auto ln_options = torch::nn::LayerNormOptions({config.hidden_size}).eps(config.layer_norm_eps);
  attention = register_module("attention", BertSelfAttention(config));
  attention_output =
      register_module("attention_output", torch::nn::Linear(config.hidden_size, config.hidden_size));
  attention_norm = register_module("attention_norm", torch::nn::LayerNorm(ln_options));
  intermediate =
      register_module("intermediate", torch::nn::Linear(config.hidden_size, config.intermediate_size));
  output = register_module("output", torch::nn::Linear(config.intermediate_size, config.hidden_size));
  output_norm = register_module("output_norm", torch::nn::LayerNorm(ln_options));
  dropout = register_module("dropout", torch::nn::Dropout(config.dropout));
}

torch::Tensor BertLayerImpl::forward(torch::Tensor x, torch::Tensor additive_mask) {
  // Post-norm (normalize after the residual add), as in the original BERT; pre-norm would change the
  // numerics and no longer match released checkpoints.
  torch::Tensor attn = dropout->forward(attention_output->forward(attention->forward(x, additive_mask)));
  x = attention_norm->forward(x + attn);
  // Exact (erf) GELU, which is what BERT was trained with, not the tanh approximation.
  torch::Tensor ffn = dropout->forward(output->forward(torch::gelu(intermediate->forward(x))));
  return output_norm->forward(x + ffn);
}

BertImpl::BertImpl(BertConfig config) : config_(std::move(config)) {
  TORCH_CHECK(config_.num_heads > 0 && config_.hidden_size % config_.num_heads == 0, "Bert: hidden_size ",
              config_.hidden_size, " is not divisible by num_heads ", config_.num_heads);
  TORCH_CHECK(config_.num_layers >= 0 && config_.vocab_size > 0 && config_.max_position_embeddings > 0 &&
                  config_.type_vocab_size > 0 && config_.intermediate_size > 0,
              "Bert: sizes must be positive");
  embeddings = register_module("embeddings", BertEmbeddings(config_));
  for (int64_t i = 0; i < config_.num_layers; ++i) {
    layers->push_back(BertLayer(config_));
  }
  register_module("layers", layers);
}

torch::Tensor BertImpl::forward(torch::Tensor input_ids, torch::Tensor attention_mask) {
  TORCH_CHECK(input_ids.dim() == 2, "Bert: expected input_ids [B, T], got ", input_ids.sizes());
  TORCH_CHECK(attention_mask.sizes() == input_ids.sizes(), "Bert: attention_mask ", attention_mask.sizes(),
              " must have the shape of input_ids ", input_ids.sizes());
  torch::Tensor x = embeddings->forward(input_ids);

  // [B, T] keep-mask -> [B, 1, 1, T] additive mask: broadcasts over heads and query positions, so a
  // padded key is ignored by every query. Built once and shared by all layers.
  torch::Tensor keep = attention_mask.to(x.scalar_type()).unsqueeze(1).unsqueeze(2);
  // rsub, not `1.0 - keep`: LibTorch's scalar-on-the-left operators expand to empty_like/fill_/sub_,
  // which would put in-place ops into a traced graph.
  torch::Tensor additive_mask = torch::rsub(keep, 1.0) * detail::mask_fill_value(x.scalar_type());

  for (const auto& layer : *layers) {
    x = layer->as<BertLayer>()->forward(x, additive_mask);
  }
  return x;
}

}  // namespace zenith::models
