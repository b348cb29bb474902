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
  /// Null for nodes the host runs: views, and graph breaks (`eager`).
  const Backend* backend = nullptr;
  /// A node no backend claims: the host runs it through the ATen dispatcher as eager does, between
  /// the kernels before and after it (a graph break). `declined` says why each backend refused.
  bool eager = false;
  /// The group's IR JSON, as the backend was asked (empty for host nodes).
  std::string group_json;
  /// Why each backend of higher priority than `backend` declined the group: "name: reason".
  std::vector<std::string> declined;
};

/// Places the nodes of `graph`: nodes sharing a Node::fusion_group are offered as one group, the
/// others alone. A node no backend claims becomes a graph break (`PlacedGroup::eager`); when no
/// node at all is claimed, throws zenith::Error naming the first and every backend's reason. The
/// result is in no particular order: see order_steps.
std::vector<PlacedGroup> partition(const ir::Graph& graph, const std::vector<const Backend*>& backends);

/// Orders placed groups so that each runs after the groups producing its inputs (ties by first
/// node). Throws zenith::Error if the groups depend on each other in a cycle.
std::vector<PlacedGroup> order_steps(const ir::Graph& graph, std::vector<PlacedGroup> placed);

}  // namespace zenith::passes
