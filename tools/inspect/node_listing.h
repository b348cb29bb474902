// `zenith-inspect nodes`: the nodes of a dump's graph, one per line.
#pragma once

#include <ostream>

#include "core/dump.h"

namespace zenith::inspect {

/// One line per node: index, backend (optimized graph only: the captured graph has no plan) and
/// the node as ir::node_to_text prints it.
void write_node_listing(const Dump& dump, bool captured, std::ostream& out);

}  // namespace zenith::inspect
