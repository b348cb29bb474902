// `zenith-inspect summary`: what a dump says about one compiled signature, at a glance.
#pragma once

#include <ostream>

#include "core/dump.h"

namespace zenith::inspect {

/// Writes the module, signature, ops by count, nodes per backend, pass statistics and compile times.
void write_summary(const Dump& dump, std::ostream& out);

}  // namespace zenith::inspect
