// The checks that a capture holds no data the tracer did not see being computed: the defence
// against a plan that remembers this call's values instead of computing them.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/ivalue.h>

#include "capture/tracer_capture.h"
#include "core/graph.h"
#include "zenith/compile.h"

namespace zenith::capture {

/// Why `capture` (of `access.forward(args)`) must not become a plan, or empty. Two checks:
///
/// - Uninitialized reads (`uninitialized_read`): a value made by `empty` that a node reads before
///   any node writes it was filled where the tracer could not see (through `data_ptr()` or an
///   accessor); a plan would read uninitialized memory.
/// - Constants (`changed_constant`): the tracer records every tensor it did not see being computed
///   as a constant. Most are constants (literals, TorchScript constants); but a result of a kernel
///   that bypasses the dispatcher (a fused kernel, a custom op without a tracer kernel) or of data
///   written into a fresh tensor is recorded the same way, and a plan holding it would return this
///   call's values for every later input. So when the capture holds tensor constants, the forward
///   is traced a second time on a perturbed copy of the tensor arguments (`perturbed_copy`); every
///   constant must come out identical and the ops the same. Parameters, buffers and random number
///   generators that the forward changes are restored afterwards, so the second run leaves no trace.
///
/// What it cannot see: data written into a tensor made by a filling factory (`zeros`, `full`),
/// whose plan replays the fill; a constant that depends only on an argument the perturbation cannot
/// change (an integer or boolean tensor whose elements are all equal) or only on the module's
/// parameters. CompileOptions::verify_calls compares plans against eager at run time for those.
std::string find_unseen_data(const detail::ModuleAccess& access, const std::vector<c10::IValue>& args,
                             const std::vector<std::pair<std::string, at::Tensor>>& state, const Capture& capture);

/// A value of `graph` made by an `empty` factory and read (or returned) before any node writes it,
/// described, or empty.
std::string uninitialized_read(const ir::Graph& graph);

/// The first tensor constant of `first` that differs in `second` (a capture of the same forward on
/// other argument values), or the first op that differs, described; or empty.
std::string changed_constant(const ir::Graph& first, const ir::Graph& second);

/// A copy of `tensor` with the same dtype, sizes, device and requires_grad and other values: its
/// elements shuffled and, for floating point, each scaled by up to 1/16 and shifted by up to 1/64
/// (so that a tensor of equal elements changes too), drawn from a generator seeded with `seed`.
/// The application's random streams are not touched.
at::Tensor perturbed_copy(const at::Tensor& tensor, std::uint64_t seed);

}  // namespace zenith::capture
