// Which values of a graph hold memory that no node of the graph writes and that exists before the
// graph runs: parameters and buffers, constants, and views of them, where no in-place op of the
// graph writes the tensor or any view of it. A kernel may read such a value before the kernels
// before it have finished (backends/cuda/programmatic_launch.h): nothing in the plan can still be
// writing it.
#pragma once

#include <vector>

#include "core/graph.h"

namespace zenith::ir {

/// Per value id of `graph`: true where the value is read-only for the whole graph, as above. A
/// call input is never counted (its memory is the caller's); a view is counted only when every
/// tensor its op reads is (a view op's result may alias any of them).
std::vector<bool> read_only_values(const Graph& graph);

}  // namespace zenith::ir
