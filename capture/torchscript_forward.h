// A TorchScript module's forward run op by op, the way the tracer must see it.
#pragma once

#include <functional>
#include <vector>

#include <ATen/core/ivalue.h>
#include <torch/csrc/jit/api/module.h>

namespace zenith::capture {

/// A forward for the tracer: `module`'s forward graph with every method call inlined, run by
/// TorchScript's simple executor, so that every op goes through the dispatcher where the tracer
/// records it.
///
/// Why not `module.forward`: from its second call on CUDA, TorchScript's profiling executor runs
/// parts of the graph as fused kernels of its own (NNC fusion groups). Those bypass the dispatcher,
/// so a trace records their results as constants and a plan would replay this call's values for
/// every later input. The module's own executor is left as it is: eager calls keep its fusion.
std::function<c10::IValue(const std::vector<c10::IValue>&)> unfused_forward(torch::jit::Module module);

/// Whether `module`'s forward, with every method call inlined, has no control flow (no prim::If
/// or prim::Loop), as every module made by torch.jit.trace: a value it reads into C++ can then
/// only become an argument of a later op, never choose which ops run.
bool straight_line(const torch::jit::Module& module);

}  // namespace zenith::capture
