// Partitioning: each node goes to the host (view ops) or to the highest-priority backend that
// claims its group. A group no backend claims is split back into single nodes.
#pragma once

#include <string>
#include <vector>

#include "core/backend.h"
#include "core/group.h"

namespace zenith::passes {

/// One placed group.
struct PlacedGroup {
  ir::Group group;
  /// Null for host-run view nodes.
  const Backend* backend = nullptr;
  /// The group's IR JSON, as the backend was asked (empty for host nodes).
  std::string group_json;
};

/// Places the nodes of `graph`. `groups` proposes node groups (indices, in topological order);
/// nodes in no proposed group are placed alone. Throws zenith::Error naming the node and every
/// backend's reason when no backend can run a node.
std::vector<PlacedGroup> partition(const ir::Graph& graph, const std::vector<const Backend*>& backends,
                                   const std::vector<std::vector<int>>& groups = {});

}  // namespace zenith::passes
