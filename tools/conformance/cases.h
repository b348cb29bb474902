// The groups zenith-conformance runs: single ops at several shapes, and small chains.
#pragma once

#include <string>
#include <vector>

#include "core/graph.h"

namespace zenith::conformance {

/// One group to run on the plugin and on the reference.
struct Case {
  std::string name;  ///< e.g. "aten::add.Tensor [4, 33] transposed"
  ir::Graph group;
};

/// Every case, in the order printed: the elementwise ops (relu, sigmoid, tanh, neg, exp and
/// add/sub/mul/div.Tensor) at [1], [7], [4, 33] and a transposed [4, 33]; ops beyond elementwise
/// (gelu, softmax.int, sum.dim_IntList, mm, layer_norm); then chains (add -> mul -> relu, and a
/// DAG with two outputs). All float32 on the CPU.
std::vector<Case> conformance_cases();

}  // namespace zenith::conformance
