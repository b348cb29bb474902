// The module the CUDA-graph and concurrency gpu tests compile: two linear layers (cuBLASLt
// products) around generated element-wise kernels; and the options they compile it with, under
// which a call that cannot run compiled fails the test instead of running eagerly.
#pragma once

#include <string>

#include <torch/torch.h>

#include "zenith/compile.h"

namespace zenith::testing {

struct MlpImpl : torch::nn::Module {
  MlpImpl() : a(register_module("a", torch::nn::Linear(32, 64))), b(register_module("b", torch::nn::Linear(64, 16))) {}
  torch::Tensor forward(torch::Tensor x) { return b->forward(torch::gelu(a->forward(x)) * 2 + 1).tanh(); }
  torch::nn::Linear a, b;
};
TORCH_MODULE(Mlp);

/// Options named `name` with fallback_to_eager off.
inline CompileOptions no_fallback(const std::string& name) {
  CompileOptions o;
  o.name = name;
  o.fallback_to_eager = false;
  return o;
}

}  // namespace zenith::testing
