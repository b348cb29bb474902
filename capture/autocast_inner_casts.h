// Casts autocast made inside a traced op, made explicit. Autocast casts at the ops it lists; a
// composite op it does not list runs its decomposition, whose ops it may list. The tracer records
// the composite op on the inputs it was called with, and the plan replays it with autocast off
// (the graph holds autocast's casts), so such a node would compute differently: under CUDA
// autocast, `cross_entropy_loss` of bfloat16 logits takes the log-softmax in bfloat16 and then
// `nll_loss` casts it to float32; replayed without autocast it stays bfloat16 throughout.
//
// Such nodes show as a result dtype the op does not give on its recorded inputs without autocast
// (each node is run on meta tensors). The ones whose decomposition is known are rewritten into it
// with the cast in the open; any other makes the trace unfit to replay.
#pragma once

#include <string>

#include "core/graph.h"

namespace zenith::capture {

/// Rewrites, in a graph traced inside an autocast region, each `aten::cross_entropy_loss` (class-index
/// target, no label smoothing) whose result dtype differs from its logits' into ATen's own
/// decomposition, `log_softmax(self, class_dim, self.dtype)`, `aten::to.dtype` to the result's dtype,
/// then `nll_loss_nd`. Returns "" when every node's results then have the dtypes the op gives on its
/// recorded inputs, else a sentence naming the first node that does not (what it read, what it
/// returned under autocast, what it gives without): a trace that must not be replayed. Nodes the
/// meta device cannot run are not judged (the plan's own check of each result's type still holds).
std::string make_autocast_inner_casts_explicit(ir::Graph& graph);

}  // namespace zenith::capture
