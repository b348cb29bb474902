// Rotary embedding as one elementwise kernel. Models rotate q and k as Hugging Face writes it:
//
//   x * cos + cat([-x2, x1], -1) * sin      (x1, x2 the halves of x's last dimension)
//
// where the concatenation is no elementwise op: a launch of its own, and the negation and the two
// products around it three more, for every rotated tensor of every layer. Over x viewed as
// [..., 2, half] the rotation is elementwise:
//
//   xv = x.view(..., 2, half)
//   rotated = where([[true], [false]], -xv[..., 1:2, :], xv[..., 0:1, :])    [..., 2, half]
//   (xv * cos.view(..., 2, half) + rotated * sin.view(..., 2, half)).reshape(x's sizes)
//
// the same products and sum for every element, so the fusion pass makes the whole rotation one
// kernel reading x, cos and sin once.
#pragma once

#include "passes/pass.h"

namespace zenith::passes {

class RotaryEmbedding : public Pass {
 public:
  /// `cuda_only`: rewrite only tensors on CUDA. Tests pass false to check the rewrite's results on
  /// the CPU.
  explicit RotaryEmbedding(bool cuda_only = true) : cuda_only_(cuda_only) {}
  std::string name() const override { return "rotary_embedding"; }
  /// Counter "rewritten": rotations now elementwise. Matches `add(mul(x, cos), mul(r, sin))` with
  /// the operands of each in either order and r = cat([neg(second half of x), first half of x],
  /// last dimension), the halves narrow or slice views; x of a floating dtype with an even last
  /// dimension, cos and sin broadcasting to x over that whole last dimension, and the sum of x's
  /// sizes. A rotation whose result would change a returned value's layout is left alone.
  void run(ir::Graph& graph, PassReport& report) override;

 private:
  bool cuda_only_;
};

}  // namespace zenith::passes
