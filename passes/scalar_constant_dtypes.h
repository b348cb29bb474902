// Scalar constants in the dtype their readers compute in: a 0-d float64 constant read by add, sub,
// mul, div, rsub or where whose result is float32. Traces make them from Python numbers that went
// through a tensor (Falcon divides its attention scores by `math.sqrt(head_dim)`, a 0-d float64
// constant). ATen casts every operand of those ops to their common dtype, float32, before
// computing (a 0-d operand does not promote a tensor of the same kind), so a float32 copy with the
// value rounded once is the same operand; the generated CUDA kernels load no float64, and a group
// reading one would run op by op.
#pragma once

#include "passes/pass.h"

namespace zenith::passes {

class ScalarConstantDtypes : public Pass {
 public:
  std::string name() const override { return "scalar_constant_dtypes"; }
  /// Counter "narrowed": operands now reading a float32 copy of a 0-d float64 constant (one copy
  /// per constant, shared by its readers). The float64 constant stays for its other readers;
  /// dead-code elimination drops it when none is left. Left alone: every other op (pow reads a 0-d
  /// exponent as a double on some paths), and readers whose result is not float32 (float16 and
  /// bfloat16 ops read a CPU scalar in float32 without rounding it to their dtype).
  void run(ir::Graph& graph, PassReport& report) override;
};

}  // namespace zenith::passes
