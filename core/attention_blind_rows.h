// zenith::attention_blind_rows: a fused attention's result with its blind rows computed as the
// model wrote attention out.
//
// A blind row is a query whose every key its additive mask hides: every entry of the mask's row
// is below kBlindRowMaskLimit (a left-padded query in a causal model, a padded one in a sliding
// window). There the written-out softmax and PyTorch's fused kernels part ways: eager's softmax
// over float32's lowest plus the scores weighs the keys evenly, the fused CUDA kernels give 0
// (measured on an H100, PyTorch 2.11), and in float16 eager rounds each sum to the dtype first
// (to a multiple of 32 near -65504). Every other row is the same sums over the same keys both
// ways, within the dtype's rounding. So attention whose mask is data runs as the fused node
// followed by this op: passes/attention_fusion.h emits it, the JIT CUDA backend runs it as one
// light kernel (backends/cuda/blind_rows_codegen.h), and any other backend through its definition
// here, which computes the written-out attention and takes its blind rows.
//
//   attention_blind_rows(Tensor attention, Tensor query, Tensor key, Tensor value,
//                        Tensor attn_mask, float scale) -> Tensor
//
// attention [B, H, T, Dv] (the fused node's result), query [B, H, T, D], key [B, H, S, D], value
// [B, H, S, Dv], attn_mask of the query's dtype broadcasting to [B, H, T, S]. The result has
// attention's sizes, dtype and layout: row (b, h, t) is attention's unless the mask's row is blind,
// then softmax(round(round(query . key * scale) + mask)) . value with eager's roundings.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "core/graph.h"

namespace zenith::ir {

/// The op's qualified name, as nodes carry it.
inline constexpr const char* kAttentionBlindRowsOp = "zenith::attention_blind_rows";

/// A mask row whose largest entry is below this is blind. 16: a row's largest logit is then rounded
/// no more coarsely than scores of that size are, in every dtype, so a row that sees a key above it
/// is the fused kernels' within their documented tolerance.
inline constexpr double kBlindRowMaskLimit = -16;

/// Query rows per (batch, head) up to which the fusion pass (passes/fusion.h) groups an attention
/// with the blind rows after it: a decode step's few queries, which the JIT CUDA backend's
/// attention kernel takes (backends/cuda/attention_codegen.h, kAttentionMaxRows, held equal to
/// this) and then computes the blind rows in, one launch instead of two. A prompt's attention runs
/// on PyTorch's fused kernels, and its blind rows stay a node of their own, on their light kernel.
inline constexpr std::int64_t kAttentionWithBlindRowsMaxRows = 16;

/// The widest head the fusion pass groups so: the kernel takes heads of a power of two of 16-byte
/// slices up to this many elements (kAttentionMaxHeadDim there, held equal). With another head it
/// would decline the group, and PyTorch's backend, claiming the group whole, would run the blind
/// rows through their definition (the written-out attention) instead of their light kernel.
inline constexpr std::int64_t kAttentionWithBlindRowsMaxHeadDim = 128;

/// The index of the attention_blind_rows node that alone reads the result of attention node
/// `index` (an `aten::scaled_dot_product_attention`), over the same query, key, value and mask, if
/// there is one. `consumers` is `graph.consumers()`.
std::optional<std::size_t> blind_rows_after(const Graph& graph, std::size_t index,
                                            const std::vector<std::vector<int>>& consumers);

}  // namespace zenith::ir
