// Seeded random programs of the ops the fusion pass groups (elementwise ops and, in some programs,
// one row reduction or normalization with a prologue and an epilogue), for testing fusion and the
// CUDA code generators against eager LibTorch on shapes and DAGs nobody wrote by hand.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

#include "common/seeded_program.h"

namespace zenith::testing {

/// The program of `seed`, well conditioned on every draw of its inputs: on the CPU, every output of
/// eager in `dtype` is within 2e-6 (float32), 5e-3 (float16) or 2e-2 (bfloat16) of eager in
/// float64, relative to its largest magnitude. A draft that is not (cancellation, say x*x - x*x,
/// or an output made only of tiny tails) is redrawn from the same seed's stream: there eager's own
/// rounding is what a comparison with eager would measure, and a kernel that rounds less could
/// never match it at a fixed tolerance. Well conditioned, a kernel that keeps intermediates in float32 stays within about
/// that bound of eager, plus the rounding of its stores.
///
/// The same seed gives the same ops, shapes and input values on every machine and standard
/// library: draws come from std::mt19937_64 (whose output the standard fixes) without std's
/// distributions (whose output it does not), and input values are drawn on the CPU in float32
/// before being converted to `dtype` and moved to `device`.
RandomProgram make_random_program(std::uint64_t seed, c10::ScalarType dtype, c10::Device device);

}  // namespace zenith::testing
