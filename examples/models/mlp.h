#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <vector>

namespace zenith::models {

enum class Activation { kGelu, kRelu };

struct MlpConfig {
  int64_t in = 0;
  std::vector<int64_t> hidden;  // one Linear + activation per entry
  int64_t out = 0;
  Activation activation = Activation::kGelu;

  // Cheap enough for CPU unit tests.
  static MlpConfig small();
  // Wide enough that the GEMMs, not launch overhead, dominate on a GPU.
  static MlpConfig large();
};

class MlpImpl : public torch::nn::Module {
 public:
  explicit MlpImpl(MlpConfig config);

  // x: [..., in] -> [..., out]. The last Linear has no activation so the output can be used as logits.
  torch::Tensor forward(torch::Tensor x);

  const MlpConfig& config() const { return config_; }

 private:
  MlpConfig config_;
  torch::nn::ModuleList layers_;
};
TORCH_MODULE(Mlp);

}  // namespace zenith::models
