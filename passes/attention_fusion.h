// Attention fusion: the attention models write out by hand,
//
//   softmax(matmul(q, k.transpose(-2, -1)) * scale + mask, -1) @ v
//
// (the scale a mul or div by a number or absent, the additive mask optional; or the scores filled
// by masked_fill or where under a constant bool mask, a causal one built from sizes, with -inf or
// the dtype's lowest, when every query attends to some key: that becomes is_causal when it is
// PyTorch's causal mask, no mask when it hides nothing, else a constant bool mask), becomes one
// aten::scaled_dot_product_attention node, which PyTorch runs as one fused kernel (flash, cuDNN
// or memory-efficient attention, as it chooses for the inputs) instead of two matrix products, a
// softmax and the score matrix in memory between them.
//
// Autocast's form of it fuses too: float16 or bfloat16 q, k and v, a float32 mask promoting the
// masked scores to float32 or a softmax asked for float32, and the probabilities cast back to v's
// dtype for the product. The fused kernels compute the softmax in float32 as well; the mask is
// cast to bfloat16 for them (finite values saturating at its lowest, so that float32's lowest
// stays finite). A float32 mask beside float16 stays as written: float16 cannot hold its range.
//
// An additive mask may hide every key from some query (a blind row: every entry of the mask's row
// below -16). There eager's written-out softmax over float32's lowest plus the scores weighs the
// keys evenly, PyTorch's fused CUDA kernels give 0, and in float16 eager rounds each sum to a
// multiple of 32 first. A constant mask without a blind row fuses as it is. A mask that is data
// (a padding or position mask), or a constant with a blind row, fuses in inference plans as the
// fused node followed by zenith::attention_blind_rows (core/attention_blind_rows.h), which computes
// the blind rows again as written, when the mask and the sums it is added to are of q's dtype
// (whether the softmax computes in that dtype or is asked for float32 and cast back: the same
// rows); elsewhere (training) such attention runs written out, its
// softmax reading 16-bit sums rounded as eager holds them (backends/cuda/reduction_codegen.h).
//
// The fused kernels hand back their result over [batch, sequence, heads, dim] memory, transposed
// to [batch, heads, sequence, dim]; the node is typed so, and the views after it (the usual merge
// of the heads, transpose(1, 2) then reshape) are typed again and become free views. Should
// PyTorch pick a kernel that returns another layout, the executor copies the result into the
// typed one (conform_output): slower, never wrong.
#pragma once

#include <cstdint>
#include <vector>

#include "passes/pass.h"

namespace zenith::passes {

/// The strides of a fused attention result of `sizes` [B, H, T, Dv]: it lies over [B, T, H, Dv]
/// memory, as flash and memory-efficient attention return it.
std::vector<std::int64_t> fused_attention_layout(const std::vector<std::int64_t>& sizes);

class AttentionFusion : public Pass {
 public:
  /// `cuda_only`: fuse only attention on CUDA tensors, where PyTorch has fused kernels for it.
  /// Tests pass false to check the rewrite's results on the CPU. `blind_rows`: fuse attention whose
  /// additive mask may have blind rows, with attention_blind_rows after the fused node (inference
  /// plans; training has no derivative rule for it).
  explicit AttentionFusion(bool cuda_only = true, bool blind_rows = false)
      : cuda_only_(cuda_only), blind_rows_(blind_rows) {}
  std::string name() const override { return "fuse_attention"; }
  /// Counter "fused": the attention patterns rewritten. A pattern is left alone when one of its
  /// intermediate values (the scores, the scaled or masked scores, the probabilities) has another
  /// reader or is returned, when q, k and v are not 4-d tensors of one floating dtype, when the
  /// mask's dtype is neither theirs nor (in autocast's form) float32 or it does not broadcast to
  /// the scores, or when a returned value's type would change. Counter "blind_rows_checked": fused
  /// patterns followed by attention_blind_rows. Counter "additive_mask_kept": patterns left written
  /// out because their additive mask may have blind rows and `blind_rows` is off (or the mask is
  /// float32 beside bfloat16).
  void run(ir::Graph& graph, PassReport& report) override;

 private:
  bool cuda_only_;
  bool blind_rows_;
};

}  // namespace zenith::passes
