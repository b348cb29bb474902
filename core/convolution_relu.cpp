#include "core/convolution_relu.h"

#include <ATen/ATen.h>
#include <torch/library.h>

namespace zenith::ir {
namespace {

bool fused_by_cudnn(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                    const std::optional<at::Tensor>& residual, bool allow_tf32) {
  const auto dtype = input.scalar_type();
  const bool floating = dtype == at::kFloat || dtype == at::kHalf || dtype == at::kBFloat16;
  auto& context = at::globalContext();
  // The fused call reads cuDNN's global TF32 flag; the trace's convolution read its own.
  const bool same_tf32 = dtype != at::kFloat || allow_tf32 == context.allowTF32CuDNN();
  auto same_kind = [&](const std::optional<at::Tensor>& t) {
    return !t || !t->defined() || (t->scalar_type() == dtype && t->device() == input.device());
  };
  return input.is_cuda() && floating && same_tf32 && context.userEnabledCuDNN() && !context.deterministicCuDNN() &&
         input.dim() == 4 && weight.scalar_type() == dtype && weight.device() == input.device() && same_kind(bias) &&
         same_kind(residual);
}

at::Tensor convolution_relu(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                            const std::optional<at::Tensor>& residual, at::IntArrayRef stride, at::IntArrayRef padding,
                            at::IntArrayRef dilation, int64_t groups, bool allow_tf32) {
  const bool add = residual && residual->defined();
  if (fused_by_cudnn(input, weight, bias, residual, allow_tf32)) {
    if (add) return at::cudnn_convolution_add_relu(input, weight, *residual, 1, bias, stride, padding, dilation, groups);
    return at::cudnn_convolution_relu(input, weight, bias, stride, padding, dilation, groups);
  }
  const std::vector<std::int64_t> no_output_padding(stride.size(), 0);
  auto out = at::_convolution(input, weight, bias, stride, padding, dilation, /*transposed=*/false, no_output_padding,
                              groups, /*benchmark=*/false, /*deterministic=*/false, /*cudnn_enabled=*/true, allow_tf32);
  if (add) out.add_(*residual);
  return out.relu_();
}

at::Tensor convolution_relu_meta(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>&,
                                 const std::optional<at::Tensor>&, at::IntArrayRef stride, at::IntArrayRef padding,
                                 at::IntArrayRef dilation, int64_t, bool) {
  return convolution_result_like(input, weight, stride, padding, dilation);
}

}  // namespace

at::Tensor convolution_result_like(const at::Tensor& input, const at::Tensor& weight, at::IntArrayRef stride,
                                   at::IntArrayRef padding, at::IntArrayRef dilation) {
  std::vector<std::int64_t> sizes = {input.size(0), weight.size(0)};
  for (std::size_t d = 0; d < stride.size(); ++d) {
    const auto extent = input.size(static_cast<std::int64_t>(d) + 2), kernel = weight.size(static_cast<std::int64_t>(d) + 2);
    sizes.push_back((extent + 2 * padding[d] - dilation[d] * (kernel - 1) - 1) / stride[d] + 1);
  }
  const bool channels_last = input.dim() == 4 && (input.suggest_memory_format() == at::MemoryFormat::ChannelsLast ||
                                                  weight.suggest_memory_format() == at::MemoryFormat::ChannelsLast);
  return at::empty(sizes, input.options().memory_format(channels_last ? at::MemoryFormat::ChannelsLast
                                                                       : at::MemoryFormat::Contiguous));
}

TORCH_LIBRARY_FRAGMENT(zenith, m) {
  m.def("convolution_relu(Tensor input, Tensor weight, Tensor? bias, Tensor? residual, int[] stride, int[] padding, "
        "int[] dilation, int groups, bool allow_tf32) -> Tensor");
}

TORCH_LIBRARY_IMPL(zenith, CompositeExplicitAutograd, m) { m.impl("convolution_relu", &convolution_relu); }

TORCH_LIBRARY_IMPL(zenith, Meta, m) { m.impl("convolution_relu", &convolution_relu_meta); }

}  // namespace zenith::ir
