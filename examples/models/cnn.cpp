#include "models/cnn.h"

#include <c10/util/Exception.h>

#include <string>
#include <utility>

namespace zenith::models {

namespace {

// Every conv is followed by a batch norm, which has its own shift, so a conv bias would be redundant.
torch::nn::Conv2d conv(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t padding) {
  return torch::nn::Conv2d(
      torch::nn::Conv2dOptions(in, out, kernel).stride(stride).padding(padding).bias(false));
}

}  // namespace

CnnConfig CnnConfig::small() {
  CnnConfig c;
  c.in_channels = 3;
  c.stem_channels = 8;
  c.layers = {1, 1};
  c.widths = {8, 16};
  c.expansion = 4;
  c.num_classes = 10;
  c.image_size = 32;
  return c;
}

CnnConfig CnnConfig::resnet50() {
  CnnConfig c;
  c.in_channels = 3;
  c.stem_channels = 64;
  c.layers = {3, 4, 6, 3};
  c.widths = {64, 128, 256, 512};
  c.expansion = 4;
  c.num_classes = 1000;
  c.image_size = 224;
  return c;
}

BottleneckImpl::BottleneckImpl(int64_t in_channels, int64_t width, int64_t expansion, int64_t stride)
    : in_channels_(in_channels), out_channels_(width * expansion) {
  TORCH_CHECK(in_channels > 0 && width > 0 && expansion > 0 && stride > 0,
              "Bottleneck: sizes and stride must be positive");
  conv1_ = register_module("conv1", conv(in_channels, width, 1, 1, 0));
  bn1_ = register_module("bn1", torch::nn::BatchNorm2d(width));
  // Stride on the 3x3 rather than the first 1x1 (ResNet v1.5): the 1x1 would otherwise discard 3/4 of
  // its input positions.
  conv2_ = register_module("conv2", conv(width, width, 3, stride, 1));
  bn2_ = register_module("bn2", torch::nn::BatchNorm2d(width));
  conv3_ = register_module("conv3", conv(width, out_channels_, 1, 1, 0));
  bn3_ = register_module("bn3", torch::nn::BatchNorm2d(out_channels_));
  if (stride != 1 || in_channels != out_channels_) {
    down_conv_ = register_module("downsample_conv", conv(in_channels, out_channels_, 1, stride, 0));
    down_bn_ = register_module("downsample_bn", torch::nn::BatchNorm2d(out_channels_));
  }
}

torch::Tensor BottleneckImpl::forward(torch::Tensor x) {
  TORCH_CHECK(x.dim() == 4 && x.size(1) == in_channels_, "Bottleneck: expected [N, ", in_channels_,
              ", H, W], got ", x.sizes());
  torch::Tensor out = torch::relu(bn1_->forward(conv1_->forward(x)));
  out = torch::relu(bn2_->forward(conv2_->forward(out)));
  out = bn3_->forward(conv3_->forward(out));
  torch::Tensor shortcut = down_conv_ ? down_bn_->forward(down_conv_->forward(x)) : x;
  // Out-of-place so the traced graph has no mutation for the JIT to reason about.
  return torch::relu(out + shortcut);
}

CnnImpl::CnnImpl(CnnConfig config) : config_(std::move(config)) {
  TORCH_CHECK(!config_.layers.empty() && config_.layers.size() == config_.widths.size(),
              "Cnn: layers and widths must be non-empty and of equal length");
  TORCH_CHECK(config_.in_channels > 0 && config_.stem_channels > 0 && config_.num_classes > 0,
              "Cnn: channel and class counts must be positive");
  stem_conv_ = register_module("stem_conv", conv(config_.in_channels, config_.stem_channels, 7, 2, 3));
  stem_bn_ = register_module("stem_bn", torch::nn::BatchNorm2d(config_.stem_channels));

  int64_t channels = config_.stem_channels;
  for (size_t stage = 0; stage < config_.layers.size(); ++stage) {
    TORCH_CHECK(config_.layers[stage] > 0, "Cnn: every stage needs at least one block");
    for (int64_t b = 0; b < config_.layers[stage]; ++b) {
      // The stem already downsamples by 4, so the first stage keeps its resolution; each later stage
      // halves it in its first block.
      const int64_t stride = (stage > 0 && b == 0) ? 2 : 1;
      Bottleneck block(channels, config_.widths[stage], config_.expansion, stride);
      channels = block->out_channels();
      blocks_->push_back(block);
    }
  }
  register_module("blocks", blocks_);
  fc_ = register_module("fc", torch::nn::Linear(channels, config_.num_classes));
}

torch::Tensor CnnImpl::forward(torch::Tensor images) {
  TORCH_CHECK(images.dim() == 4, "Cnn: expected images [N, C, H, W], got ", images.sizes());
  TORCH_CHECK(images.size(1) == config_.in_channels, "Cnn: expected ", config_.in_channels,
              " input channels, got ", images.size(1));
  torch::Tensor x = torch::relu(stem_bn_->forward(stem_conv_->forward(images)));
  x = torch::max_pool2d(x, /*kernel_size=*/{3, 3}, /*stride=*/{2, 2}, /*padding=*/{1, 1});
  for (const auto& block : *blocks_) {
    x = block->as<Bottleneck>()->forward(x);
  }
  // Adaptive pooling makes the head independent of the input resolution.
  x = torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1);
  return fc_->forward(x);
}

}  // namespace zenith::models
