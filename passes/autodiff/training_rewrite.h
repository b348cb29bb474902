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
//   scaled_dot_product_attention without dropout, with an additive mask, on CUDA, where the
//   memory-efficient kernel takes the inputs
//                              -> expand of the mask to [B, H, T, S] (as ATen prepares it for
//                                 this kernel), then
//                                 _scaled_dot_product_efficient_attention (+ log-sum-exp, the
//                                 random-number seed and offset), whose backward is ATen's fused one
#pragma once

#include <vector>

#include "core/graph.h"

namespace zenith::autodiff {

/// Rewrites `graph` in place. The new results' types are provisional (copies of the first
/// result's type): the caller runs the graph and retypes them from the tensors it gets. Returns the
/// ids of the values whose types are provisional.
std::vector<int> rewrite_for_training(ir::Graph& graph);

}  // namespace zenith::autodiff
