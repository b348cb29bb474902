// The integers of a graph that may depend on tensor sizes, and the comparison that decides whether
// two graphs (or plans) captured at different sizes are the same program apart from them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/graph.h"
#include "core/plan.h"

namespace zenith::capture {

/// One integer of a graph: a size or stride of a value, or an integer constant argument of a node.
struct IntSlot {
  enum class Kind { Size, Stride, Argument };
  Kind kind = Kind::Size;
  /// The value id (sizes, strides) or the node index (arguments).
  int owner = -1;
  /// The dimension (sizes, strides) or the argument index (arguments).
  int position = 0;
  /// The element within an integer-list argument, else 0.
  int element = 0;

  /// e.g. "size 1 of %12 (float32[2, 7, 16])" or "argument 'size' of node 4 (aten::view)".
  std::string describe(const ir::Graph& graph) const;
};

/// Every integer slot of `graph`, in a fixed order: per value id its sizes then strides, then per
/// node its integer arguments. Two graphs of the same structure give the same list.
std::vector<IntSlot> int_slots(const ir::Graph& graph);

/// The slots' values, in the order of `int_slots`.
std::vector<std::int64_t> read_slots(const ir::Graph& graph, const std::vector<IntSlot>& slots);

/// Writes one slot.
void write_slot(ir::Graph& graph, const IntSlot& slot, std::int64_t value);

/// Empty when `a` and `b` are the same program apart from their integer slots (same values,
/// dtypes, ranks, devices, roles; same nodes, operators, edges and non-integer arguments; equal
/// constants); otherwise the first difference, readable.
std::string structure_difference(const ir::Graph& a, const ir::Graph& b);

/// As structure_difference, for plans: their graphs, and the same steps over the same nodes on the
/// same backends.
std::string plan_difference(const Plan& a, const Plan& b);

}  // namespace zenith::capture
