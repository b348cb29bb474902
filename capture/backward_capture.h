// Backward capture: the derivative rules (passes/autodiff) run once, under the LibTorch tracer, on
// the forward's own tensors; the trace becomes the backward graph. Every type in it is exact
// because ATen computed it.
#pragma once

#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "core/graph.h"
#include "core/interpreter.h"
#include "passes/autodiff/backward_graph.h"

namespace zenith::capture {

struct BackwardCapture {
  autodiff::BackwardGraph backward;
  /// Why the signature cannot be differentiated (an op with no rule, an in-place write on a value
  /// that needs a gradient), or empty.
  std::string unsupported;
  /// The op at fault when `unsupported` is set, e.g. "aten::erfinv".
  std::string op;
  /// Per forward output: it depends on an input requiring a gradient (and has a floating dtype).
  std::vector<bool> differentiable;
};

/// Runs `forward` once on `inputs` through the interpreter and returns every value's tensor by id,
/// leaving no trace: inputs the graph writes (batch norm's running statistics) are cloned first,
/// and the random number generators of the devices involved are restored afterwards.
std::vector<at::Tensor> forward_values(const ir::Graph& forward, std::vector<at::Tensor> inputs);

/// Runs `forward` the same way, holding no more at once than eager does, and returns every value's
/// strides by id (ir::interpret_strides): the layouts a rewrite that changed some left to ATen.
std::vector<std::vector<std::int64_t>> forward_strides(const ir::Graph& forward, std::vector<at::Tensor> inputs);

/// Runs `forward` once for capture_backward, the same way (no trace left), holding each value only
/// until its last reader as eager does: every value's type, and the tensors of the inputs and of the
/// integer and boolean values (indices, masks, targets) a derivative rule may read. The floating
/// values rules read are not kept: the capture records ops, and a rule's ops do not depend on their
/// data. `input_requires_grad` as for capture_backward.
ir::TypedRun forward_run_for_backward(const ir::Graph& forward, std::vector<at::Tensor> inputs,
                                      const std::vector<bool>& input_requires_grad);

/// Differentiates `forward`, given `run` (forward_run_for_backward's, taken: each tensor in it is let
/// go once no rule left to run may read it, so the caller should hold no other reference).
/// A floating value a rule reads that `run` did not keep is made as zeros of its recorded type when
/// first read, and let go the same way. `input_requires_grad` says, per forward input, whether the
/// call's tensor requires a gradient. The backward's inputs are the forward values its rules read
/// (BackwardGraph::saved), then the gradients of the forward outputs that lead to an input requiring
/// one; its outputs are those inputs' gradients.
BackwardCapture capture_backward(const ir::Graph& forward, ir::TypedRun run,
                                 const std::vector<bool>& input_requires_grad);

}  // namespace zenith::capture
