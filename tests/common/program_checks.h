// A random program (tests/common/random_program.h, random_attention.h, random_convolution.h) on the
// IR, for the tests that check passes and code generators without a plan: captured as
// zenith::compile captures a callable, and a rewritten graph of it run by the reference
// interpreter on every draw of its inputs against eager on the same draw.
#pragma once

#include <functional>
#include <string>

#include "capture/tracer_capture.h"
#include "common/seeded_program.h"
#include "core/graph.h"

namespace zenith::testing {

/// The capture of `program` on its `inputs`: one traced eager run, converted to the IR;
/// `unsupported` says why the trace is not IR, if so.
capture::Capture capture_program(const RandomProgram& program);

/// `graph` (a capture of `program`, rewritten) interpreted on `inputs` and every fresh draw,
/// each output compared with eager's on the same draw: the graph's declared sizes and strides
/// (the layout a plan returns) and the interpreted sizes equal eager's, max |graph - eager| /
/// max |eager| within `tolerance`. Returns what differed, one line per draw, or empty;
/// `worst` keeps the largest error / tolerance seen.
std::string differences_on_every_draw(const ir::Graph& graph, const RandomProgram& program, double tolerance,
                                      double& worst);

/// One program of a rewrite test: captured, `rewrite` run on the graph, the graph verified, then
/// compared as differences_on_every_draw does. Returns what failed (the capture's reason, an
/// exception, the differences), followed by the program's description and the rewritten graph; or
/// empty.
std::string rewritten_differences(const RandomProgram& program, const std::function<void(ir::Graph&)>& rewrite,
                                  double tolerance, double& worst);

}  // namespace zenith::testing
