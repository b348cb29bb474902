// The module the CUDA-graph and concurrency gpu tests compile: two linear layers (cuBLASLt
// products) around generated element-wise kernels; they compile it with common/no_fallback.h's
// options.
#pragma once

#include <torch/torch.h>

#include "common/no_fallback.h"

namespace zenith::testing {

struct MlpImpl : torch::nn::Module {
  MlpImpl() : a(register_module("a", torch::nn::Linear(32, 64))), b(register_module("b", torch::nn::Linear(64, 16))) {}
  torch::Tensor forward(torch::Tensor x) { return b->forward(torch::gelu(a->forward(x)) * 2 + 1).tanh(); }
  torch::nn::Linear a, b;
};
TORCH_MODULE(Mlp);

}  // namespace zenith::testing
