// Capture through the LibTorch tracer: one eager forward, recorded, converted to the IR.
// Kept behind this one function so another capture (dispatcher-level) can replace it.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <ATen/core/ivalue.h>

#include "core/graph.h"
#include "zenith/compile.h"

namespace zenith::capture {

/// A captured forward.
struct Capture {
  /// The IR: inputs are the tensor arguments (role Input) then the state (role Parameter). Empty
  /// when `unsupported` is set.
  ir::Graph graph;
  /// Why the trace could not become IR (an untraceable construct), or empty.
  std::string unsupported;
  /// What the traced forward returned: this call's result.
  c10::IValue result;
  /// Ops that read into C++ a tensor the trace computed from constants and sizes alone (TorchScript's
  /// `aten::Int` of a size, a mask's `aten::equal` against a constant), in order. Their values were
  /// evaluated at capture: the trace holds for this call's exact sizes and non-tensor arguments,
  /// which the signature guards; it must not become a symbolic plan.
  std::vector<std::string> reads_from_sizes;
  /// Positions in the call's argument list of the tensor arguments, in graph input order.
  std::vector<int> tensor_arg_positions;
  /// Reads into C++ of tensors computed from the call's arguments, parameters or buffers, in order:
  /// the trace after each holds only for the value read. Their tensors are the graph's last
  /// outputs (value_guards.size() of them, outside the output structure), compared with `expected`
  /// by the plan (Plan::value_checks).
  struct ValueGuard {
    std::string op;                     ///< the op that read, e.g. "aten::item"
    at::Tensor expected;                ///< a copy of what it read
    std::vector<int> inputs;            ///< graph inputs the read tensor was computed from
  };
  std::vector<ValueGuard> value_guards;
};

/// Tensors larger than this are not guarded: a plan that holds only for one value of a large
/// tensor is a remembered result, not a computation (their reads run the call eagerly).
constexpr std::int64_t kMaxGuardedElements = 64;

/// Runs `access.forward(args)` once under the tracer with `state` (the live parameters and buffers)
/// as extra graph inputs, and converts the trace. Non-tensor arguments are baked in as constants.
/// Exceptions thrown by forward itself propagate unchanged; a trace the IR cannot hold sets
/// `unsupported` (the result is still this call's).
Capture capture_forward(const detail::ModuleAccess& access, const std::vector<c10::IValue>& args,
                        const std::vector<std::pair<std::string, at::Tensor>>& state);

}  // namespace zenith::capture
