// The reference interpreter: runs a graph node by node through the ATen dispatcher, with no
// backend and no plan. What compiled plans are checked against when no eager module is at hand
// (replaying a dump, testing passes).
#pragma once

#include <vector>

#include <ATen/core/ivalue.h>

#include "core/graph.h"

namespace zenith::ir {

/// Runs `graph` on one tensor per graph input (in order); returns the flat outputs. Throws
/// zenith::Error for a constant without data or a missing input.
std::vector<at::Tensor> interpret(const Graph& graph, const std::vector<at::Tensor>& inputs);

/// The same, returning every value's tensor by value id (undefined for unused ids).
std::vector<at::Tensor> interpret_values(const Graph& graph, const std::vector<at::Tensor>& inputs);

/// The same, returning every value's strides by value id (empty for unused ids): the layout ATen
/// gives each value. Each tensor is dropped after its last reader, so the run holds about as much
/// memory at once as eager does.
std::vector<std::vector<std::int64_t>> interpret_strides(const Graph& graph, const std::vector<at::Tensor>& inputs);

}  // namespace zenith::ir
