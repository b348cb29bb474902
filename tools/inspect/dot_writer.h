// `zenith-inspect dot`: the optimized graph of a dump as Graphviz DOT.
#pragma once

#include <ostream>

#include "core/dump.h"

namespace zenith::inspect {

/// Writes a digraph: one box per node labelled with its op and backend and filled with the
/// backend's colour, one ellipse per graph input or constant and per output, and edges labelled
/// with the short type of the value they carry (e.g. "float32[3, 4]").
void write_dot(const Dump& dump, std::ostream& out);

}  // namespace zenith::inspect
