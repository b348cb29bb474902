#include "models/lora.h"

#include <c10/util/Exception.h>
#include <torch/nn/functional/linear.h>
#include <torch/nn/init.h>

#include <cmath>
#include <set>

namespace zenith::models {

LoraAdapterImpl::LoraAdapterImpl(int64_t in_features, int64_t out_features, LoraOptions options)
    : options_(options) {
  TORCH_CHECK(in_features > 0 && out_features > 0, "LoraAdapter: features must be positive, got ", in_features,
              " -> ", out_features);
  TORCH_CHECK(options_.rank > 0, "LoraAdapter: rank must be positive, got ", options_.rank);
  TORCH_CHECK(options_.dropout >= 0.0 && options_.dropout < 1.0, "LoraAdapter: dropout must be in [0, 1), got ",
              options_.dropout);
  lora_A = register_parameter("lora_A", torch::empty({options_.rank, in_features}));
  lora_B = register_parameter("lora_B", torch::zeros({out_features, options_.rank}));
  {
    torch::NoGradGuard no_grad;
    torch::nn::init::kaiming_uniform_(lora_A, /*a=*/std::sqrt(5.0));
  }
  // No module at all for p = 0 (PEFT uses Identity): nothing random can then enter the graph.
  if (options_.dropout > 0.0) {
    dropout_ = register_module("dropout", torch::nn::Dropout(options_.dropout));
  }
}

torch::Tensor LoraAdapterImpl::forward(torch::Tensor x) {
  TORCH_CHECK(x.size(-1) == lora_A.size(1), "LoraAdapter: expected input features ", lora_A.size(1), ", got ",
              x.sizes());
  if (dropout_) x = dropout_->forward(x);
  namespace F = torch::nn::functional;
  // Through the rank-r bottleneck first: two thin products, never the [out, in] matrix B A.
  return F::linear(F::linear(x, lora_A), lora_B) * options_.scaling();
}

std::vector<torch::Tensor> lora_parameters(torch::nn::Module& module) {
  std::vector<torch::Tensor> parameters;
  for (const auto& child : module.modules(/*include_self=*/true)) {
    if (auto* adapter = child->as<LoraAdapterImpl>()) {
      parameters.push_back(adapter->lora_A);
      parameters.push_back(adapter->lora_B);
    }
  }
  return parameters;
}

int64_t mark_only_lora_trainable(torch::nn::Module& module) {
  std::set<const c10::TensorImpl*> trainable;
  for (const auto& parameter : lora_parameters(module)) trainable.insert(parameter.unsafeGetTensorImpl());
  int64_t elements = 0;
  for (auto& parameter : module.parameters(/*recurse=*/true)) {
    const bool train = trainable.count(parameter.unsafeGetTensorImpl()) > 0;
    parameter.set_requires_grad(train);
    if (train) elements += parameter.numel();
  }
  return elements;
}

}  // namespace zenith::models
