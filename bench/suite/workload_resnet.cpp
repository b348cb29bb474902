#include <torch/torch.h>

#include "case_files.h"
#include "fixed_shape.h"
#include "models/cnn.h"
#include "workloads.h"

namespace zenith::bench {

namespace {

// Channels-last (NHWC) weights and activations: what cuDNN's tensor-core convolutions want in
// float16. Only the 4-D tensors (convolution weights) have a layout to change.
void to_channels_last(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  for (auto& p : module.parameters()) {
    if (p.dim() == 4) p.set_data(p.contiguous(at::MemoryFormat::ChannelsLast));
  }
}

}  // namespace

std::vector<Result> run_resnet(const Context& context, const CaseSpec& spec) {
  using zenith::models::Cnn;
  using zenith::models::CnnConfig;
  const auto config = spec.text("config") == "resnet50" ? CnnConfig::resnet50() : CnnConfig::small();
  const std::int64_t batch = spec.integer("batch"), image = spec.integer("image");
  const bool channels_last = spec.flag("channels_last");
  CaseFiles files(context, spec);
  Cnn model(config);
  model->eval();
  files.load_weights(*model);
  model->to(context.device, spec.dtype());
  if (channels_last) to_channels_last(*model);
  FixedCase c;
  c.spec = &spec;
  c.dtype = spec.dtype();
  auto images = files.input("images", [&] {
    return torch::randn({batch, config.in_channels, image, image}, torch::TensorOptions().dtype(spec.dtype()));
  });
  c.inputs = {channels_last ? images.contiguous(at::MemoryFormat::ChannelsLast) : images};
  c.eager = call_with<1>([model](at::Tensor x) mutable { return model->forward(x); });
  if (files.present()) c.python_outputs = {files.python_output("logits")};
  auto modes = standard_modes(context, files, [&spec, model] {
    auto fast = zenith::compile(model, zenith_options(spec.name));
    return Mode{call_with<1>(fast), [fast] { return zenith_info(fast); }};
  });
  return measure_fixed(context, c, modes);
}

}  // namespace zenith::bench
