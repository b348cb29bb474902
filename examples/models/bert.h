#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

#include <cstdint>

namespace zenith::models {

struct BertConfig {
  int64_t vocab_size = 30522;
  int64_t hidden_size = 768;
  int64_t num_layers = 12;
  int64_t num_heads = 12;
  int64_t intermediate_size = 3072;
  int64_t max_position_embeddings = 512;
  int64_t type_vocab_size = 2;
  double layer_norm_eps = 1e-12;
  double dropout = 0.1;  // hidden and attention-probability dropout; inert in eval()

  int64_t head_dim() const { return hidden_size / num_heads; }

  static BertConfig small();
  static BertConfig base();  // bert-base-uncased
};

class BertEmbeddingsImpl : public torch::nn::Module {
 public:
  explicit BertEmbeddingsImpl(const BertConfig& config);

  // input_ids: int64 [B, T] -> [B, T, H]. Every token gets token type 0 (single-segment input).
  torch::Tensor forward(torch::Tensor input_ids);

  torch::nn::Embedding word_embeddings{nullptr}, position_embeddings{nullptr}, token_type_embeddings{nullptr};
  torch::nn::LayerNorm layer_norm{nullptr};
  torch::nn::Dropout dropout{nullptr};

 private:
  int64_t max_positions_;
};
TORCH_MODULE(BertEmbeddings);

class BertSelfAttentionImpl : public torch::nn::Module {
 public:
  explicit BertSelfAttentionImpl(const BertConfig& config);

  // x: [B, T, H], additive_mask: broadcastable to [B, heads, T, T] (0 = attend, very negative = ignore)
  // -> context [B, T, H], before the output projection.
  torch::Tensor forward(torch::Tensor x, torch::Tensor additive_mask);

  torch::nn::Linear query{nullptr}, key{nullptr}, value{nullptr};
  torch::nn::Dropout dropout{nullptr};

 private:
  int64_t num_heads_;
  int64_t head_dim_;
};
TORCH_MODULE(BertSelfAttention);

class BertLayerImpl : public torch::nn::Module {
 public:
  explicit BertLayerImpl(const BertConfig& config);

  // x: [B, T, H], additive_mask as for BertSelfAttention -> [B, T, H]
  torch::Tensor forward(torch::Tensor x, torch::Tensor additive_mask);

  BertSelfAttention attention{nullptr};
  torch::nn::Linear attention_output{nullptr};
  torch::nn::LayerNorm attention_norm{nullptr};
  torch::nn::Linear intermediate{nullptr};
  torch::nn::Linear output{nullptr};
  torch::nn::LayerNorm output_norm{nullptr};
  torch::nn::Dropout dropout{nullptr};
};
TORCH_MODULE(BertLayer);

class BertImpl : public torch::nn::Module {
 public:
  explicit BertImpl(BertConfig config);

  // input_ids: int64 [B, T]; attention_mask: int64 [B, T], 1 = real token, 0 = padding
  // -> last hidden states [B, T, H]. Rows at padded positions are computed but meaningless.
  torch::Tensor forward(torch::Tensor input_ids, torch::Tensor attention_mask);

  const BertConfig& config() const { return config_; }

  BertEmbeddings embeddings{nullptr};
  torch::nn::ModuleList layers;

 private:
  BertConfig config_;
};
TORCH_MODULE(Bert);

}  // namespace zenith::models
