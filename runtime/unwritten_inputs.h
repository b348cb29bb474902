// The inputs of a plan's kernel steps that no launch of the plan writes, for a CUDA graph of the
// plan: a kernel recorded into the graph may read them before the kernels before it have finished
// (zn_launch_args.inputs_unwritten; the JIT CUDA plugin starts its matrix-vector kernel early and
// loads the weight while the kernel before it runs). Counted: parameters, buffers and constants
// that no step writes and views of them (ir::read_only_values), and the values the plan keeps
// derived from such alone (runtime/derived_values.h), which are computed before the graph runs and
// are not recomputed inside it. Everything else (call inputs, results of steps that run) is not.
// That is an analysis of values; whether two inputs are one memory is seen only in the tensors a
// graph is recorded with (read_only_memory_shared), and then nothing counts.
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

#include "core/plan.h"

namespace zenith {

class DerivedValues;

/// Per step of a plan (by index): empty for a host step, else one entry per step input, 1 where
/// the input is unwritten as above.
using UnwrittenInputs = std::vector<std::vector<std::uint8_t>>;

/// The unwritten inputs of `plan`'s kernel steps when its graph skips `derived`'s steps (null:
/// every step runs in the graph).
UnwrittenInputs unwritten_inputs(const Plan& plan, const DerivedValues* derived);

/// Whether, among the tensors a graph of `plan` is recorded with (`inputs`, one per graph input)
/// and its constants, one that ir::read_only_values counts shares memory with one it does not (a
/// parameter passed as a call argument too, tied weights one of which the plan writes): a write
/// to the one changes the other, which an analysis of values cannot see. Such a graph is recorded
/// with every entry 0 (nothing_unwritten).
bool read_only_memory_shared(const Plan& plan, const std::vector<at::Tensor>& inputs);

/// `unwritten` with every entry 0: the kernels wait for the kernels before them before they read
/// anything.
UnwrittenInputs nothing_unwritten(UnwrittenInputs unwritten);

}  // namespace zenith
