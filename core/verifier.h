// Structural checks of a Graph: every problem a pass or a hand-edited dump could introduce.
#pragma once

#include "core/graph.h"

namespace zenith::ir {

/// Throws zenith::Error describing the first problem: a value id that is not its index, a value
/// read before it is defined or defined twice, a missing input or output, a constant without data
/// (unless `allow_missing_constant_data`), an output structure pointing nowhere, aliases that do
/// not match the outputs.
void verify(const Graph& graph, bool allow_missing_constant_data = false);

}  // namespace zenith::ir
