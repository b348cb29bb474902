// The dynamic-shape workload's model: Linear(features, features) then ReLU, as in the issue's
// sweep. Its parameter names (linear.weight, linear.bias) are the Python copy's too.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

namespace zenith::bench {

class LinearReluImpl : public torch::nn::Module {
 public:
  explicit LinearReluImpl(std::int64_t features)
      : linear(register_module("linear", torch::nn::Linear(features, features))) {}

  torch::Tensor forward(torch::Tensor x) { return torch::relu(linear->forward(x)); }

  torch::nn::Linear linear;
};
TORCH_MODULE(LinearRelu);

}  // namespace zenith::bench
