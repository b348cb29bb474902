// zenith::convolution_scale_relu: a 2-D convolution whose result each output channel scales and
// shifts (a batch norm in eval mode), an optional residual added and a ReLU, as one op:
//
//   convolution_scale_relu(Tensor input, Tensor weight, Tensor scale, Tensor shift, Tensor? residual,
//                          int[] stride, int[] padding, int[] dilation, int groups, bool allow_tf32) -> Tensor
//     = relu(_convolution(input, weight, None, ..., allow_tf32) * scale[c] + shift[c] + residual)
//
// `scale` and `shift` are float32 vectors with one value per output channel. Where the batch norm's
// folded weight would cost a copy of the weight too large to keep (passes/convolution_epilogue.h,
// passes/kept_weight_copies.h), this form keeps only those two vectors, and cuDNN can still apply
// the batch norm in the convolution's epilogue: on CUDA the PyTorch GPU plugin registers a runner
// (plugins/torch_gpu/cudnn_scaled_convolution.h) that runs the op as one cuDNN graph, the scale,
// shift, add and ReLU in float32 on the convolution's float32 sums, rounded once. Anywhere the
// runner is absent or declines, the op runs the written form: the convolution in the input's dtype,
// then the scale, shift, add and ReLU in float32 (as eager's batch norm computes its affine),
// rounded once to the input's dtype. The result is laid out as the convolution's would be.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>

#include <ATen/core/Tensor.h>

namespace zenith::ir {

/// The op's qualified name, as nodes carry it.
inline constexpr const char* kConvolutionScaleReluOp = "zenith::convolution_scale_relu";

/// The op's arguments, as its schema orders them.
struct ScaledConvolution {
  const at::Tensor& input;
  const at::Tensor& weight;
  const at::Tensor& scale;
  const at::Tensor& shift;
  const std::optional<at::Tensor>& residual;
  at::IntArrayRef stride, padding, dilation;
  std::int64_t groups;
  bool allow_tf32;
};

/// The written form, on any device (the reference the fused runner is tested against).
at::Tensor convolution_scale_relu_written(const ScaledConvolution& call);

/// Why `result`, another implementation's result for `call` (4-D, the written form's sizes),
/// cannot stand for the written form's, or empty when it can: every element written (no NaN
/// where the written form gives a finite value) and within 1% (float16) or 4% (otherwise) of the
/// written form's largest finite magnitude (the written form rounds the convolution to the dtype
/// before the scale; a fused kernel need not). The fused runner checks each new plan so. The
/// written epilogue runs a block of pixels at a time, which keeps its float32 intermediates and
/// the comparison's small beside the call's own tensors. Waits for the device.
std::string convolution_scale_relu_disagreement(const ScaledConvolution& call, const at::Tensor& result);

/// A fused implementation for some calls: the result, or nullopt to have the written form run.
using ScaledConvolutionRunner = std::function<std::optional<at::Tensor>(const ScaledConvolution&)>;

/// Installs the runner CUDA calls try first (an empty function removes it); a plugin installs its
/// own when loaded and removes it when unloaded.
void set_scaled_convolution_runner(ScaledConvolutionRunner runner);

/// Calls of the op that the runner computed, since the process started (tests and reports read it).
std::int64_t scaled_convolution_runner_calls();

}  // namespace zenith::ir
