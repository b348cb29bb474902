// The reference interpreter: runs a graph node by node through the ATen dispatcher, with no
// backend and no plan. What compiled plans are checked against when no eager module is at hand
// (replaying a dump, testing passes).
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include <ATen/core/ivalue.h>

#include "core/graph.h"
#include "core/tensor_type.h"

namespace zenith::ir {

/// Runs `graph` on one tensor per graph input (in order); returns the flat outputs. Throws
/// zenith::Error for a constant without data or a missing input.
std::vector<at::Tensor> interpret(const Graph& graph, const std::vector<at::Tensor>& inputs);

/// The same, returning every value's tensor by value id (undefined for unused ids).
std::vector<at::Tensor> interpret_values(const Graph& graph, const std::vector<at::Tensor>& inputs);

/// What interpret_types gives: by value id, the type of each value as ATen laid it out (unset for
/// ids the run made no tensor of), and the tensors of the values asked for (undefined elsewhere).
struct TypedRun {
  std::vector<std::optional<TensorType>> types;
  std::vector<at::Tensor> kept;
};

/// Says whether a value (its id and its tensor, as the run made it) is kept.
using KeepValue = std::function<bool(int id, const at::Tensor& tensor)>;

/// The same run, holding each intermediate only until its last reader (about as much memory at once
/// as eager holds), except those `keep` accepts, which are returned with the inputs and constants.
/// No `keep`: none but those.
TypedRun interpret_types(const Graph& graph, const std::vector<at::Tensor>& inputs, const KeepValue& keep);

/// The same, returning every value's strides by value id (empty for unused ids) and keeping none.
std::vector<std::vector<std::int64_t>> interpret_strides(const Graph& graph, const std::vector<at::Tensor>& inputs);

}  // namespace zenith::ir
