// A readable text form of a Graph, for logs, tests and zenith-inspect.
#pragma once

#include <string>

#include "core/graph.h"

namespace zenith::ir {

/// One line per input and per node, then the outputs:
///   %0 : float32[3, 4] strides [4, 1] cpu  (input x)
///   %5 = aten::relu(self=%0)  : float32[3, 4] ...
///   return (%5)
std::string to_text(const Graph& graph);

/// One node on one line, as to_text writes it.
std::string node_to_text(const Graph& graph, const Node& node);

}  // namespace zenith::ir
