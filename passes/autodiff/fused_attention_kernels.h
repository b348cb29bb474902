// Attention in training on CUDA: a scaled_dot_product_attention node becomes the fused kernel that
// eager's own scaled_dot_product_attention would run for the same inputs (cuDNN's, flash or the
// memory-efficient one: ATen chooses), called as eager calls it. With dropout the kernel draws its
// random numbers itself, so only eager's kernel, called with eager's arguments in eager's order,
// draws eager's numbers; each kernel's forward returns what its fused backward reads (log-sum-exp,
// the random-number seed and offset).
#pragma once

#include <functional>
#include <vector>

#include "core/graph.h"

namespace zenith::autodiff {

/// The fused attention kernels of ATen's scaled_dot_product_attention on CUDA.
enum class AttentionKernel {
  None,       ///< Zenith does not run a fused kernel for this node (see eager_attention_kernel)
  Flash,      ///< _scaled_dot_product_flash_attention
  Efficient,  ///< _scaled_dot_product_efficient_attention
  Cudnn,      ///< _scaled_dot_product_cudnn_attention
};

/// "flash", "efficient", "cudnn" or "none".
const char* attention_kernel_name(AttentionKernel kernel);

/// The kernel eager's scaled_dot_product_attention would run for `node`'s inputs: ATen's own
/// choice (`_fused_sdp_choice`, under the global SDP flags of this moment) asked with tensors of
/// the recorded types. None where that is ATen's math, the node is not on CUDA, or Zenith cannot
/// call the kernel exactly as eager does: a boolean mask (converted differently per kernel and
/// version), grouped key/value heads, a mask the memory-efficient kernel would pad, a head size
/// flash would pad, a mask that needs a gradient (cuDNN's backward gives it none).
AttentionKernel eager_attention_kernel(const ir::Graph& graph, const ir::Node& node);

/// The nodes that compute `node` (a scaled_dot_product_attention) through `kernel`, as eager's
/// scaled_dot_product_attention calls it: the first result stays `node`'s. `provisional` makes a
/// new intermediate value of a placeholder type; the caller retypes each from a run (results a
/// kernel leaves undefined, such as cuDNN's sequence lengths, keep the placeholder and nothing
/// reads them).
std::vector<ir::Node> fused_attention_nodes(ir::Graph& graph, const ir::Node& node, AttentionKernel kernel,
                                            const std::function<int(const ir::TensorType&)>& provisional);

}  // namespace zenith::autodiff
