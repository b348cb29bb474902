// Matrix-product epilogues: the fusion pass groups a matrix product (mm, addmm, bmm, matmul,
// linear) with what cuBLASLt-style epilogues compute in the same call: a bias added along the
// rows, then a ReLU or a tanh-approximated GELU. Nothing else joins such a group, so a backend
// that runs it as one library call never has to decline half of it.
#pragma once

#include <vector>

#include "core/graph.h"

namespace zenith::passes {

/// A group rooted at a matrix product.
struct MatmulGroup {
  /// The value its last node produces: the only one an epilogue may read.
  int tail = -1;
  bool has_bias = false;
  /// An activation joined: nothing follows it.
  bool closed = false;
};

/// Whether `node` is a matrix product a group may start with (one tensor result).
bool starts_matmul_group(const ir::Node& node);

/// The group `node` starts.
MatmulGroup matmul_group_of(const ir::Graph& graph, const ir::Node& node);

/// Whether `node` extends `group` as its next epilogue step: it reads the group's tail (and, for a
/// bias, one 1-D tensor of the product's last size and dtype, giving the product's dtype), and
/// nothing else reads the tail. On success `group` is updated.
bool extend_matmul_group(const ir::Graph& graph, const ir::Node& node, MatmulGroup& group,
                         const std::vector<std::vector<int>>& consumers);

}  // namespace zenith::passes
