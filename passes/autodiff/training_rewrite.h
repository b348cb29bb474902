// Training rewrite: before autodiff, ops whose backward needs something the forward computes and
// throws away are replaced by their ATen forms that return it, so the backward reads it instead of
// computing it again (or, for dropout, instead of being unable to):
//   dropout (drawing)          -> native_dropout            (+ mask)
//   batch_norm (training)      -> cudnn_batch_norm where eager runs cuDNN's kernels, else
//                                 native_batch_norm         (+ batch mean, inverse std)
//   layer_norm                 -> native_layer_norm         (+ mean, inverse std)
//   max_pool2d                 -> max_pool2d_with_indices   (+ indices)
//   cross_entropy_loss         -> log_softmax, nll_loss_nd  (the log-probabilities)
//   matmul of batched operands -> contiguous on an operand whose batch dimensions do not fold
//                                 (the copy matmul makes inside), then matmul
//   scaled_dot_product_attention on CUDA, where eager's own call runs a fused kernel
//                              -> that kernel's op as eager calls it: cuDNN's, flash or the
//                                 memory-efficient one (+ log-sum-exp, the random-number seed and
//                                 offset), whose backward is ATen's fused one; with dropout its
//                                 random numbers are eager's (passes/autodiff/fused_attention_kernels.h)
#pragma once

#include <vector>

#include "core/graph.h"

namespace zenith::autodiff {

/// What rewrite_for_training did.
struct TrainingRewrite {
  /// The values whose types are provisional (copies of the first result's type, or a placeholder):
  /// the caller runs the graph and retypes them from the tensors it gets; a result that stays
  /// undefined keeps its placeholder, and nothing reads it.
  std::vector<int> provisional;
  /// Attention nodes that became a fused kernel: the layouts after them are the kernel's.
  int attention_kernels = 0;
};

/// Rewrites `graph` in place.
TrainingRewrite rewrite_for_training(ir::Graph& graph);

}  // namespace zenith::autodiff
