// Widening casts folded into the sum that reads them: `sum(x.to(float32), dims)` is
// `sum(x, dims, dtype=float32)` by ATen's definition of the dtype argument (the input is cast before
// the reduction), so one kernel reads x where two read and wrote a float32 copy of it. Mixed
// precision makes the pattern: the gradient of a float32 bias added to a bfloat16 product is the
// bfloat16 gradient cast to float32 and summed over the rows.
#pragma once

#include "passes/pass.h"

namespace zenith::passes {

class ReductionInputCasts : public Pass {
 public:
  std::string name() const override { return "reduction_casts"; }
  /// Counter "folded": `aten::sum.dim_IntList` and `aten::mean.dim` nodes with no dtype of their own
  /// that now read the cast's input with the cast's dtype. Only casts that widen exactly (float16
  /// and bfloat16 to float32 or float64, float32 to float64), read by nothing else, not returned and
  /// not written in place; dead-code elimination drops the cast.
  void run(ir::Graph& graph, PassReport& report) override;
};

}  // namespace zenith::passes
