// Sibling products: projections that read the same input (a transformer's q, k and v; an MLP's
// gate and up) become one product over their weights concatenated, and each projection's result a
// narrow view of its columns:
//
//   matmul(x, Wq.t()), matmul(x, Wk.t()), matmul(x, Wv.t())
//     -> y = matmul(x, cat([Wq, Wk, Wv]).t());  q = y.narrow(-1, 0, nq), k = ..., v = ...
//
// (`addmm(b, x, W.t())`, linear's form with a bias, likewise, the biases concatenated too; and
// `matmul(x, W.t()) + b`, the form linear over more than two dimensions traces as, when the add is
// the product's one reader: one add of the concatenated biases, which the matrix-product epilogue
// takes into the product, instead of an add over each strided view.) At a
// decoder's batch 1 every product is a launch that streams its weight: one launch over 10.5 MB
// instead of three over 8.4, 1 and 1 MB saves two launches and the small products' latency floor.
// The concatenated weight reads parameters alone, so an inference plan keeps it between calls and
// computes it again whenever a source parameter is updated in place or replaced
// (runtime/derived_values.h). Parameter packing (runtime/parameter_packing.h) then moves the
// weights into the concatenation, so that it costs no memory of its own; where a weight cannot be
// moved, the concatenation is a copy, the memory of those weights once more.
//
// Only for inference plans whose derived values are kept (CompileOptions::keep_derived_values):
// otherwise the concatenation would run, and copy every weight, at each call.
#pragma once

#include "passes/pass.h"

namespace zenith::passes {

class SiblingProducts : public Pass {
 public:
  /// `cuda_only`: rewrite only products on CUDA tensors, where launches are what the rewrite saves.
  /// Tests pass false to check the rewrite's results on the CPU.
  explicit SiblingProducts(bool cuda_only = true) : cuda_only_(cuda_only) {}
  std::string name() const override { return "concatenate_sibling_products"; }
  /// Counters "concatenated" (products that became one with a sibling; three q, k and v
  /// projections count 3) and "kept_apart" (sibling sets left alone because a narrow view would
  /// change a returned value's layout or could not be viewed by what reads it). Products are
  /// siblings when they read the same input value, their weights are 2-d parameters of one dtype
  /// and device with the same number of columns, contiguous, read transposed (`aten::t`), and
  /// either none has a bias or each has a 1-d parameter for one (addmm with beta and alpha 1, or
  /// an add with alpha 1 that is the matmul's one reader).
  void run(ir::Graph& graph, PassReport& report) override;

 private:
  bool cuda_only_;
};

}  // namespace zenith::passes
