// A random program (tests/common/random_program.h, random_attention.h) captured as
// zenith::compile captures a callable: one traced eager run on its `inputs`, converted to the IR.
// For the tests that check passes and code generators on the IR without a plan.
#pragma once

#include "capture/tracer_capture.h"
#include "common/random_program.h"

namespace zenith::testing {

/// The capture of `program` on its `inputs`; `unsupported` says why the trace is not IR, if so.
capture::Capture capture_program(const RandomProgram& program);

}  // namespace zenith::testing
