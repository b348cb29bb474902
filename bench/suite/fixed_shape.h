// Measuring a case whose inputs keep one shape: eager first (checked against Python's eager
// output, which proves the two sides build the same model), then every other mode: set up, first
// call, output checked against eager, warm-up, timed calls, peak memory.
#pragma once

#include <vector>

#include "case_spec.h"
#include "context.h"
#include "modes.h"
#include "result.h"

namespace zenith::bench {

class CaseFiles;

struct FixedCase {
  const CaseSpec* spec = nullptr;
  Tensors inputs;
  Call eager;
  /// Python eager's outputs for the same weights and inputs; empty in a smoke run.
  Tensors python_outputs;
  /// The outputs' dtype, which sets the tolerance.
  c10::ScalarType dtype = c10::ScalarType::Float;
};

/// One result per mode: "eager" first, then `modes` in order.
std::vector<Result> measure_fixed(const Context& context, const FixedCase& c, const std::vector<ModeMaker>& modes);

/// The makers of the modes the context asks for: TorchScript and AOTInductor from the case's
/// artifacts, Zenith from `zenith`.
std::vector<ModeMaker> standard_modes(const Context& context, const CaseFiles& files,
                                      std::function<Mode()> zenith);

/// A result for a case and mode, named, before anything ran.
Result named_result(const CaseSpec& spec, const std::string& mode);

}  // namespace zenith::bench
