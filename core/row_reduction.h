// Row reductions: the reductions and normalizations that work over the trailing ("inner")
// dimensions of one input, so that every output row depends on one input row. The fusion pass
// groups them with their elementwise neighbours; the reduction code generator runs such a group
// as one kernel, one block per row.
#pragma once

#include <optional>

#include "core/graph.h"

namespace zenith::ir {

/// What a row reduction reads and over which dimensions.
struct RowReduction {
  /// The op's family.
  enum class Kind { Sum, Mean, Max, Min, Var, Std, Softmax, LogSoftmax, LayerNorm };
  Kind kind = Kind::Sum;
  /// The value reduced ("self" or "input").
  int input = -1;
  /// Its rank, and how many of its trailing dimensions the op reduces (at least 1).
  int rank = 0;
  int inner = 0;
  /// Reductions: the result keeps the reduced dimensions as size 1. Normalizations (softmax,
  /// log_softmax, layer_norm) always give the input's shape.
  bool keepdim = false;
  /// Var and Std: the correction subtracted from the element count (1 unbiased, 0 biased).
  double correction = 0;
};

/// The row reduction `node` is, or nullopt when it is none: another op, dimensions that are not
/// trailing, a reduction of a 0-d tensor, an explicit output dtype other than the result's, or an
/// argument that is not a constant.
std::optional<RowReduction> row_reduction(const Graph& graph, const Node& node);

}  // namespace zenith::ir
