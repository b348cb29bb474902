// The op registry: what Zenith knows about each ATen operator beyond its schema.
#pragma once

#include <string>
#include <vector>

namespace zenith::ir {

/// How an op touches memory, which decides where fusion and backends may take it.
enum class OpCategory {
  Elementwise,    ///< one output element from the same-index input elements (after broadcasting)
  Reduction,      ///< reduces or normalizes over dimensions (sum, mean, softmax, layer_norm, ...)
  MatrixProduct,  ///< mm, addmm, bmm, matmul, linear, ...
  View,           ///< returns an alias of its input (view, transpose, slice, ...)
  Other,          ///< everything else (convolution, pooling, embedding, cat, creation ops, ...)
};

const char* category_name(OpCategory category);

/// What the registry says about one op.
struct OpInfo {
  OpCategory category = OpCategory::Other;
  /// May draw random numbers (dropout in training, attention with dropout_p > 0): where it does,
  /// never folded, merged or dropped.
  bool random = false;
  /// Listed in the registry (an unlisted op still runs, as Other).
  bool known = false;
};

/// Looks up an op by its name with namespace ("aten::add", "aten::add_" and "aten::add.Tensor"
/// all find the entry for add).
OpInfo op_info(const std::string& op);

/// Every op the registry lists, with namespace.
std::vector<std::string> registered_ops();

}  // namespace zenith::ir
