// Seeded random convolution blocks: the layers convolution nets are made of, for testing the
// inference rewrites of convolutions (batch norm as arithmetic, passes/batch_norm_decomposition.h;
// channels-last convolutions, capture/inference_layout.h) and the fusion of what follows a
// convolution against eager LibTorch on shapes nobody wrote by hand.
//
// A program is one or two blocks over an image batch [N, C, H, W] (contiguous or channels-last),
// each a 2-D convolution (kernel 1, 3 or 5; stride 1 or 2; padding none or "same"; dilation 1 or
// 2; dense or depthwise; with or without a bias), then, each maybe, an eval-mode batch norm, an
// activation (relu, relu6, silu, gelu, hardswish), a residual add of the block's input where the
// shapes allow, and a 2x2 max or average pooling. Its result is the last map, or its global
// average ([N, C], as a classifier's head takes it: only then can the convolutions run
// channels-last, since the caller must get eager's layout).
//
// The weights, biases and batch-norm statistics are inputs (a [4, C] tensor per batch norm: its
// mean, variance, weight and bias), drawn afresh with every draw: a plan that kept a value of
// them would fail. Programs are kept to seeded_program.h's conditioning bound (eager in the dtype
// against float64 on the CPU).
#pragma once

#include <cstdint>

#include <ATen/ATen.h>

#include "common/seeded_program.h"

namespace zenith::testing {

/// The convolution program of `seed` with its inputs and kFreshInputDraws fresh draws, on
/// `device`. The same seed gives the same program and values on every machine. `has_reduction` is
/// true: a convolution sums in the order its algorithm chooses, which differs between layouts.
RandomProgram make_random_convolution(std::uint64_t seed, c10::ScalarType dtype, c10::Device device);

}  // namespace zenith::testing
