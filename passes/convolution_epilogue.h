// A convolution's epilogue in inference: conv -> batch norm (eval) -> [residual add] -> ReLU, the
// tail of every block of a ResNet, becomes one zenith::convolution_relu (core/convolution_relu.h)
// over the batch norm folded into the convolution's weight and bias:
//
//   relu(batch_norm(conv(x, W, b), gamma, beta, mean, var, eps) [+ z])
//     -> convolution_relu(x, W * s, (b - mean) * s + beta, z)   with s = gamma * rsqrt(var + eps)
//
// which cuDNN runs as one call, the bias, the add and the ReLU in the convolution's epilogue: on an
// H100 at ResNet-50 b64's shapes that costs the convolution's time and a little, where the batch
// norm, add and ReLU as one elementwise kernel after it read and write the whole activation again.
// The folded weight and bias read parameters and buffers alone: an inference plan keeps them
// (runtime/derived_values.h) and computes them again whenever a source changes, so a statistic or
// weight updated in place or replaced is seen, never stale. They cost a copy of those weights.
//
// In float16 and bfloat16 the fold computes in float32 and rounds the folded weight and bias once.
//
// Only for inference plans whose derived values are kept (CompileOptions::keep_derived_values):
// otherwise the fold would run, over every weight, at each call. And only where the folded weight
// is small against the activation the convolution writes (passes/kept_weight_copies.h,
// CompileOptions::kept_weight_fraction). Elsewhere, in float16 and bfloat16 with the input, weight
// and residual channels-last, and a weight at most 10.5 times the result's elements, the tail
// becomes one zenith::convolution_scale_relu (core/convolution_scale_relu.h) instead: the
// convolution over the weight as it is, the batch norm as a float32 scale and shift per output
// channel (derived values of a few bytes a channel), which cuDNN applies in the convolution's
// epilogue with the residual add and the ReLU. Elsewhere, where the input is channels-last and the
// weight is not (ATen's convolution would copy the weight channels-last at every call: the
// channels-last rewrite keeps no copy of it, passes/channels_last_convolutions.h), the weight is
// folded at every call instead (ir::Node::per_call): one elementwise kernel multiplies it by the
// scale and writes it channels-last, reading and writing the bytes ATen's copy does, and the
// batch norm's and ReLU's passes over the result are gone; the scale and the folded bias stay
// kept. What that can win: ResNet-50 b1 float32 on an H200 ran in 0.543 ms with every fold kept
// (ZENITH_KEPT_WEIGHT_FRACTION=inf, a 125-MB peak) against 0.626 to 0.686 as built
// (docs/performance.md, the 08:57 run's section). The fold's kernel took 0.105 ms for the sixteen
// weights in its first form, above ATen's copy (0.071); with the relayout's run loop
// (backends/cuda/elementwise_codegen.cpp) 0.059, and the call 0.61 ms (docs/performance.md, the
// 11:15 run's section). Otherwise the batch norm stays, and runs after the convolution as an
// elementwise kernel.
#pragma once

#include <limits>

#include "passes/pass.h"

namespace zenith::passes {

class ConvolutionEpilogue : public Pass {
 public:
  /// `cuda_only`: rewrite only convolutions on CUDA tensors, where cuDNN fuses the epilogue. Tests
  /// pass false to check the rewrite's results on the CPU (the op runs the written ops there).
  /// `kept_fraction`: fold only where the weight has at most this many times the elements of the
  /// ReLU's result (passes/kept_weight_copies.h); infinity folds wherever the pattern matches.
  explicit ConvolutionEpilogue(bool cuda_only = true, double kept_fraction = std::numeric_limits<double>::infinity())
      : cuda_only_(cuda_only), kept_fraction_(kept_fraction) {}
  std::string name() const override { return "fuse_convolution_epilogue"; }
  /// Counters "fused" (convolutions whose batch norm and ReLU became one op with them),
  /// "with_residual" (of those, the ones that took a residual add too), "scaled" (of those, the
  /// ones whose batch norm became a scale and shift rather than a folded weight),
  /// "folded_each_call" (of those, the ones whose weight is folded at every call, not kept) and
  /// "weight_too_large" (tails that matched and stay as written: their weight too large to keep a
  /// folded copy of, and neither other form taken).
  /// A 2-D convolution (_convolution, not transposed, cuDNN enabled, not deterministic) of
  /// float32, float16 or bfloat16 is fused when its one reader is a batch norm in eval mode, whose
  /// one reader is a ReLU or an add (alpha 1, of another tensor of exactly its type) whose one
  /// reader is a ReLU, and the op's result has exactly the ReLU's type.
  void run(ir::Graph& graph, PassReport& report) override;

 private:
  bool cuda_only_;
  double kept_fraction_;
};

}  // namespace zenith::passes
