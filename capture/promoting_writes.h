// In-place arithmetic that writes another dtype than it reads, made functional. ATen computes
// `self.add_(other)` with a float32 `other` into a bfloat16 `self` in float32 and stores bfloat16;
// the functional `add` would return float32, so TorchScript's mutation removal is not allowed to
// turn it into one (capture/tracer_capture.cpp) and it stays in place. LibTorch's linear on inputs
// of three or more dimensions adds its bias so: under autocast, a float32 bias into the bfloat16
// product. In place, it is a write the derivative rules do not differentiate; as `add` in float32
// and a cast back, it is two ops they do, with eager's values.
#pragma once

#include "core/graph.h"

namespace zenith::capture {

/// Rewrites each `aten::add_`, `sub_`, `mul_` or `div_` (Tensor overloads) that reads a tensor of
/// another dtype than it writes into its functional op in the promoted dtype followed by
/// `aten::to.dtype` back (or the functional op alone where the promoted dtype is the written one:
/// Falcon divides its float32 attention scores in place by a 0-dim float64 tensor), where the
/// write is private: the written tensor was made by a node that is not a view, and nothing after
/// the write reads it (later readers read the write's result), and it is not a result. Returns how
/// many it rewrote.
int functionalize_promoting_writes(ir::Graph& graph);

}  // namespace zenith::capture
