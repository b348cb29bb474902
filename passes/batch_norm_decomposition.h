// Batch norm in inference as elementwise arithmetic: y = (x - mean) * a + bias with a = weight *
// rsqrt(var + eps), every per-channel tensor viewed so that it broadcasts along the channel
// dimension. As one ATen op it is a kernel of its own (cuDNN's or ATen's) between a
// convolution and the ReLU or residual add after it; as arithmetic the fusion pass puts it in the
// same kernel as those, as Inductor's decomposition does. The statistics and affine parameters
// are read at every call, never folded into constants, so a parameter updated or replaced between
// calls is seen.
#pragma once

#include "passes/pass.h"

namespace zenith::passes {

class BatchNormDecomposition : public Pass {
 public:
  /// `cuda_only`: decompose only batch norms whose input lies on a CUDA device, where a code
  /// generator fuses the arithmetic; on the CPU the CPU plugin runs ATen's ops one by one, and one
  /// batch_norm is faster there than five elementwise ops. Tests pass false to check the rewrite's
  /// results on the CPU.
  explicit BatchNormDecomposition(bool cuda_only = true) : cuda_only_(cuda_only) {}
  std::string name() const override { return "decompose_batch_norm"; }
  /// Counter "decomposed": the batch norms rewritten. Only inference ones (training=false, running
  /// statistics given) whose result type the arithmetic reproduces exactly (dtype, sizes, strides)
  /// are; the others stay as they are.
  void run(ir::Graph& graph, PassReport& report) override;

 private:
  bool cuda_only_;
};

}  // namespace zenith::passes
