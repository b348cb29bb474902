#include "models/mlp.h"

#include <c10/util/Exception.h>

#include <utility>

namespace zenith::models {

MlpConfig MlpConfig::small() { return MlpConfig{16, {32, 32}, 8, Activation::kGelu}; }

MlpConfig MlpConfig::large() { return MlpConfig{1024, {4096, 4096, 4096}, 1024, Activation::kGelu}; }

MlpImpl::MlpImpl(MlpConfig config) : config_(std::move(config)) {
  TORCH_CHECK(config_.in > 0 && config_.out > 0, "Mlp: in and out must be positive, got ", config_.in,
              " and ", config_.out);
  int64_t width = config_.in;
  for (int64_t h : config_.hidden) {
    TORCH_CHECK(h > 0, "Mlp: hidden sizes must be positive, got ", h);
    layers_->push_back(torch::nn::Linear(width, h));
    width = h;
  }
  layers_->push_back(torch::nn::Linear(width, config_.out));
  register_module("layers", layers_);
}

torch::Tensor MlpImpl::forward(torch::Tensor x) {
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) == config_.in, "Mlp: expected input [..., ", config_.in, "], got ",
              x.sizes());
  const size_t n = layers_->size();
  for (size_t i = 0; i < n; ++i) {
    x = layers_[i]->as<torch::nn::Linear>()->forward(x);
    if (i + 1 == n) break;
    // Functional activations rather than modules: nothing to register, and the traced graph
    // gets a plain aten::gelu / aten::relu node.
    x = config_.activation == Activation::kGelu ? torch::gelu(x) : torch::relu(x);
  }
  return x;
}

}  // namespace zenith::models
