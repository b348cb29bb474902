// `zenith-inspect diff`: what changed between two dumps of one model, for "why did my model
// recompile" and "what did this upgrade change".
#pragma once

#include <ostream>

#include "core/dump.h"

namespace zenith::inspect {

/// Writes what differs from `before` to `after`: the module and signature, node counts, ops added
/// or removed per op (optimized, as captured, and the backward), the plan's groups with their
/// backends, nodes per backend, pass statistics, and the report's verdicts (eager fallback,
/// symbolic dimensions, training). Compile times are shown for information and never count as a
/// difference. Returns the number of differences (0: the dumps describe the same compilation).
int write_dump_diff(const Dump& before, const Dump& after, std::ostream& out);

}  // namespace zenith::inspect
