// A group: nodes of a graph cut out into a self-contained graph, as a backend receives them.
#pragma once

#include <vector>

#include "core/graph.h"

namespace zenith::ir {

/// A group cut out of a graph, with its ids mapped back to the graph's.
struct Group {
  /// The group as a graph of its own ("kind": "group"): ids are the parent graph's ids, inputs are
  /// the values it reads from outside (constants included, passed at launch like any input),
  /// outputs the values read after it or returned, output_aliases set for in-place writes.
  Graph graph;
  /// Indices of the nodes in the parent graph.
  std::vector<int> nodes;
};

/// Cuts `nodes` (indices into `parent.nodes`, in order) out of `parent`. `consumers` is
/// parent.consumers(), passed in so that partitioning many groups computes it once.
Group extract_group(const Graph& parent, const std::vector<int>& nodes, const std::vector<std::vector<int>>& consumers);

}  // namespace zenith::ir
