// LoRA (Hu et al. 2021, "Low-Rank Adaptation of Large Language Models"): a frozen projection W is
// fine-tuned as W + (alpha / r) B A, where A [r, in] and B [out, r] are the only trained weights.
// LoraAdapter computes the low-rank term alone; the model adds it to the frozen projection's
// output, so the projection itself (and its checkpoint name) stays as it was.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <vector>

namespace zenith::models {

struct LoraOptions {
  int64_t rank = 8;
  double alpha = 32.0;   // the update is scaled by alpha / rank, so changing the rank keeps its size
  double dropout = 0.0;  // on the adapter's input only, in training mode; 0 leaves the path deterministic

  double scaling() const { return alpha / static_cast<double>(rank); }
};

class LoraAdapterImpl : public torch::nn::Module {
 public:
  // A is initialized as PEFT does (kaiming-uniform with a = sqrt(5), nn.Linear's default), B to
  // zeros, so a freshly attached adapter leaves the model's output exactly unchanged.
  LoraAdapterImpl(int64_t in_features, int64_t out_features, LoraOptions options);

  // x: [..., in] -> [..., out], dropout(x) A^T B^T * scaling: the term to add to the frozen output.
  torch::Tensor forward(torch::Tensor x);

  const LoraOptions& options() const { return options_; }

  torch::Tensor lora_A;  // [rank, in]
  torch::Tensor lora_B;  // [out, rank]

 private:
  LoraOptions options_;
  torch::nn::Dropout dropout_{nullptr};  // empty when options.dropout is 0
};
TORCH_MODULE(LoraAdapter);

/// The parameters of every LoraAdapter inside `module` (itself included), in module order: what
/// a LoRA fine-tune hands its optimizer.
std::vector<torch::Tensor> lora_parameters(torch::nn::Module& module);

/// Freezes every parameter of `module` except those of its LoraAdapters (PEFT's
/// mark_only_lora_as_trainable). Returns how many parameter elements remain trainable.
int64_t mark_only_lora_trainable(torch::nn::Module& module);

}  // namespace zenith::models
