// zenith::convolution_relu: a 2-D convolution, its bias, an optional residual added and a ReLU, as
// one op, which cuDNN runs as one fused call (conv, bias, add and activation in the convolution's
// epilogue) where it computes what the written ops would:
//
//   convolution_relu(Tensor input, Tensor weight, Tensor? bias, Tensor? residual, int[] stride,
//                    int[] padding, int[] dilation, int groups, bool allow_tf32) -> Tensor
//     = relu(_convolution(input, weight, bias, stride, padding, dilation, ..., allow_tf32) + residual)
//
// Inference nets write the convolution, a batch norm, the residual add and the ReLU as four ops; a
// batch norm in eval mode folded into the convolution's weight and bias (passes/convolution_epilogue.h)
// leaves this form, and each op after the convolution otherwise reads and writes the whole
// activation once more. On CUDA, with cuDNN enabled and its TF32 flag what the traced convolution
// recorded (float32 only), the op runs at::cudnn_convolution_relu or cudnn_convolution_add_relu;
// anywhere else it runs the written ops (_convolution with the recorded flag, add, relu), so it is
// never other arithmetic than the trace's. The result is laid out as the convolution's would be:
// channels-last when the input or the weight is, else contiguous.
#pragma once

#include <ATen/core/Tensor.h>

namespace zenith::ir {

/// The op's qualified name, as nodes carry it.
inline constexpr const char* kConvolutionReluOp = "zenith::convolution_relu";

/// An empty tensor of the result's type (sizes, dtype, device; channels-last when the input or the
/// weight is), for the fused convolution ops' meta kernels.
at::Tensor convolution_result_like(const at::Tensor& input, const at::Tensor& weight, at::IntArrayRef stride,
                                   at::IntArrayRef padding, at::IntArrayRef dilation);

}  // namespace zenith::ir
