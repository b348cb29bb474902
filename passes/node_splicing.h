// Writing new nodes into a graph in place of old ones, for the passes that rewrite a pattern into
// other nodes (passes/meta_values.h types what they make).
#pragma once

#include <cstddef>
#include <set>
#include <vector>

#include "core/graph.h"

namespace zenith::passes {

/// A node applying `op` (with `overload`) to `args`, without results yet: type_result
/// (passes/meta_values.h) gives it one.
ir::Node make_node(const char* op, const char* overload, std::vector<ir::Argument> args);

/// Puts `made` where node `at` of `graph` is, in order, and drops the nodes whose indices are in
/// `dropped` (`at` among them when `made` replaces it). Returns the index of the first node after
/// `made`: what may read the new nodes starts there.
std::size_t splice_nodes(ir::Graph& graph, std::size_t at, std::vector<ir::Node> made, const std::set<std::size_t>& dropped);

}  // namespace zenith::passes
