// Seeded random projections: the linear layers of transformer blocks, for testing the matrix-
// product paths (cuBLASLt with its bias and activation epilogues, the generated matrix-vector
// kernel of a decode step, backends/cuda/matrix_vector.h) and the sibling-products rewrite
// (passes/sibling_products.h) against eager LibTorch on shapes nobody wrote by hand.
//
// A program reads x [..., M, K] (leading dims none, [2] or [2, 3]; M from 1, a decode step's row,
// to 33; K a multiple of 16 bytes or not; x contiguous, a transposed view or a slice of a wider
// tensor) and projects it by one to three weights [N, K] (siblings reading the same x, as q, k and
// v or gate and up do), each written as linear (with or without a bias), matmul with the weight's
// transpose plus a bias, or addmm over a 2-D x, each maybe followed by relu, tanh-GELU, GELU or
// SiLU. Two siblings of one width meet as SwiGLU (silu(a) * b) or a sum, three as a
// concatenation; the result may take a residual add of x and a layer norm or RMSNorm. Weights,
// biases and norm weights are inputs, drawn afresh with every draw.
#pragma once

#include <cstdint>

#include <ATen/ATen.h>

#include "common/seeded_program.h"

namespace zenith::testing {

/// The projection program of `seed` with its inputs and kFreshInputDraws fresh draws, on
/// `device`, kept to seeded_program.h's conditioning bound. `has_reduction` is true (a product
/// sums in an order of its algorithm's choosing).
RandomProgram make_random_projection(std::uint64_t seed, c10::ScalarType dtype, c10::Device device);

}  // namespace zenith::testing
