// Scalar constants beside device tensors: a 0-d CPU tensor read by an op whose result is on a
// device, as traces make them from sizes (DeBERTa divides its scores by the square root of the
// head size, a CPU tensor made from a size). ATen reads such an operand as a number; Zenith's
// device backends take tensors of their device only, so the op would break the plan and run
// eagerly between kernels. Where the tensor is a constant (sizes fold to constants in a plan of
// exact sizes), a copy of it on the op's device is the same operand: a 0-d tensor takes part in
// type promotion alike on either device, and its value is the one the capture fixed. CUDA only,
// and only where a CUDA device is present to hold the copy.
#pragma once

#include "passes/pass.h"

namespace zenith::passes {

class ScalarConstantsOnDevice : public Pass {
 public:
  std::string name() const override { return "scalar_constants_on_device"; }
  /// Counter "moved": operands of device ops now reading a device copy of a 0-d CPU constant (one
  /// copy per constant and device, shared by its readers there). The CPU constant stays for its
  /// CPU readers; dead-code elimination drops it when none is left.
  void run(ir::Graph& graph, PassReport& report) override;
};

}  // namespace zenith::passes
