#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <vector>

namespace zenith::models {

struct CnnConfig {
  int64_t in_channels = 3;
  int64_t stem_channels = 64;
  std::vector<int64_t> layers;  // bottleneck blocks per stage
  std::vector<int64_t> widths;  // bottleneck (inner) width per stage; block output is width * expansion
  int64_t expansion = 4;
  int64_t num_classes = 1000;
  int64_t image_size = 224;  // what the model is meant for; the network itself accepts any size

  static CnnConfig small();
  static CnnConfig resnet50();
};

// 1x1 reduce -> 3x3 (carries the stride) -> 1x1 expand, added to a projected shortcut when the shape changes.
class BottleneckImpl : public torch::nn::Module {
 public:
  BottleneckImpl(int64_t in_channels, int64_t width, int64_t expansion, int64_t stride);

  // x: [N, in_channels, H, W] -> [N, width * expansion, ceil(H / stride), ceil(W / stride)]
  torch::Tensor forward(torch::Tensor x);

  int64_t in_channels() const { return in_channels_; }
  int64_t out_channels() const { return out_channels_; }

 private:
  int64_t in_channels_;
  int64_t out_channels_;
  torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr}, conv3_{nullptr};
  torch::nn::BatchNorm2d bn1_{nullptr}, bn2_{nullptr}, bn3_{nullptr};
  // Empty holders when the identity shortcut already has the right shape.
  torch::nn::Conv2d down_conv_{nullptr};
  torch::nn::BatchNorm2d down_bn_{nullptr};
};
TORCH_MODULE(Bottleneck);

class CnnImpl : public torch::nn::Module {
 public:
  explicit CnnImpl(CnnConfig config);

  // images: float [N, in_channels, H, W] -> logits [N, num_classes]
  torch::Tensor forward(torch::Tensor images);

  const CnnConfig& config() const { return config_; }

 private:
  CnnConfig config_;
  torch::nn::Conv2d stem_conv_{nullptr};
  torch::nn::BatchNorm2d stem_bn_{nullptr};
  torch::nn::ModuleList blocks_;
  torch::nn::Linear fc_{nullptr};
};
TORCH_MODULE(Cnn);

}  // namespace zenith::models
