// Seeded random attention: one layer's attention in the forms models write it, for testing the
// attention rewrites (passes/attention_fusion.h, passes/grouped_query_attention.h) and the JIT
// CUDA attention kernel (backends/cuda/attention_codegen.h) against eager LibTorch on shapes and
// forms nobody wrote by hand.
//
// A program draws its sizes (batch, query heads, key-value heads, query rows, keys, head dims),
// how the heads arrive (as [B, H, T, D] tensors, or as [B, T, H * D] hidden states split by view
// and transpose), how the key-value heads are shared (repeat_kv's unsqueeze-expand-reshape,
// repeat_interleave, or scaled_dot_product_attention's enable_gqa), the attention itself (one
// scaled_dot_product_attention, or matmul, scale, mask, softmax and matmul written out, with
// autocast's float32 softmax in float16 and bfloat16), the mask (none; an additive float mask of
// 0 and the dtype's lowest; a random additive bias; a bool mask, applied by masked_fill or where
// when written out; a causal mask built inside with tril, or is_causal), and whether the heads are
// merged back. Masks vary by draw and broadcast in the shapes models give them.
//
// Every query sees at least one key, except in some scaled_dot_product_attention programs with a
// bool mask, where one query sees none: PyTorch gives such a row 0 there. (Written out, eager gives
// NaN for it, and once fused, 0: the one place where the rewrite changes a result, so the
// generator leaves it out; docs/architecture.md says so.)
#pragma once

#include <cstdint>

#include <ATen/ATen.h>

#include "common/seeded_program.h"

namespace zenith::testing {

/// The attention program of `seed` with its inputs (q, k, v, then the mask when it is an input)
/// and kFreshInputDraws fresh draws of them, on `device`. The same seed gives the same program and
/// values on every machine (std::mt19937_64 without std's distributions; values drawn on the CPU in
/// float32, then converted). `has_reduction` is true (softmax reorders sums).
RandomProgram make_random_attention(std::uint64_t seed, c10::ScalarType dtype, c10::Device device);

}  // namespace zenith::testing
