// Value checks: a forward that reads its arguments' data into C++ (`.item()`, `at::equal`) still
// compiles. The read is evaluated at capture like any other, the trace after it holds for the value
// read, and the plan compares the read tensor with that value as soon as a step computes it; a call
// whose value differs runs eagerly (its plan stopped before anything a caller sees was written).
#pragma once

#include <string>
#include <vector>

#include "capture/tracer_capture.h"
#include "core/plan.h"

namespace zenith::detail {

/// Why `capture`'s reads cannot become value checks, or empty: a node with an effect a caller
/// could see (a run stopped by a check would leave it done, and eager would do it again), or a
/// read tensor that the forward writes in place afterwards.
std::string value_check_refusal(const capture::Capture& capture);

/// Gives `plan` (lowered from `capture`'s graph, whose last outputs are the read tensors) one
/// check per guarded read, after the step that computes its tensor. Throws zenith::Error when no
/// step computes one.
void attach_value_checks(Plan& plan, const capture::Capture& capture);

/// One line per check of `plan`: "aten::item of f32[] (graph value %7), checked after step 3 of 12".
std::vector<std::string> describe_value_checks(const Plan& plan);

}  // namespace zenith::detail
