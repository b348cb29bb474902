// Attention with few queries per head (a decode step: one token's queries, or a grouped-query
// attention's group of heads reading one key-value head) as one generated kernel, instead of
// PyTorch's fused kernels, which are built for long query blocks: for a decode step they spend
// most of their time starting up, and cuDNN copies the mask and the queries first.
//
// One `aten::scaled_dot_product_attention` node (no dropout, not causal, no enable_gqa) over
// query [B, H, R, D], key and value [B, H, S, D] (any strides), an optional mask that broadcasts
// to [B, H, R, S] (additive, of the query's dtype or float32, or bool: true keeps), and an
// optional scale. A block takes kAttentionRowsPerBlock query rows of one (batch, head) and every
// key, in passes of 256 keys: each warp takes 32 of a pass, each lane scoring one key against the
// block's rows, and keeps its own running maximum and sum of the softmax (the online softmax of
// FlashAttention) and its probabilities times the values, a 16-byte slice of the head dimension a
// lane, in float32 registers; the warps meet once, at the end, in shared memory. A lane's loads
// for a pass (its key, its mask entries, the values it weighs) are issued ahead, the first pass's
// before the block's queries are in shared memory, so that a decode step's kernel makes one trip
// to memory. Keys and values whose rows are aligned 16-byte vectors (a cache as models hold it)
// are read so; other layouts an element at a time. A long cache is one block's serial work:
// splitting the keys over blocks (flash-decoding) is not done yet. The result is written once, in
// the output's own strides, so the caller chooses its layout. A row whose every key is masked is
// 0, as in PyTorch's math and memory-efficient attention (its cuDNN attention differs, see
// tests/common/cudnn_attention_off.h).
//
// The kernel is correct for every size; it is fast while R is small (decode). A group with more
// query rows per head than kAttentionMaxRows (a prompt) is declined, and PyTorch's kernels run it.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include <dlpack/dlpack.h>

#include "core/graph.h"

namespace zenith::cuda {

/// Bumped whenever generated code changes for the same key: part of every key.
constexpr int kAttentionCodegenVersion = 9;

/// Query rows of one (batch, head) one block takes; more rows are spread over more blocks. One:
/// a block's work is serial, so a decode step's few heads need many blocks. Measured on an H100
/// (bench_inference_profile --model llama, float16, 2026-11-27): 8 rows a block, the decoder's 4
/// key-value heads as 4 blocks, took 11.7 us a layer; its blocks then re-read the keys and values
/// of their head, from L2.
constexpr int kAttentionRowsPerBlock = 1;

/// The most query rows per (batch, head) a group may have for the kernel to serve it: every block
/// reads all of its head's keys and values, so many rows (a prompt) would read them many times.
constexpr std::int64_t kAttentionMaxRows = 16;

/// The widest head dimension the kernel takes (a power of two of 16-byte slices up to it).
constexpr std::int64_t kAttentionMaxHeadDim = 128;

/// A generated attention kernel and what a launch needs to know about it.
struct AttentionKernel {
  std::string key;      ///< dtype, mask kind and head dimension, canonical text (no sizes)
  std::string name;     ///< "zenith_attn_<hash of key>"
  std::string source;   ///< CUDA C++
  bool index64 = true;  ///< offsets are always 64-bit
  /// Value ids of the parameters, in order: the group's inputs, then its output.
  std::vector<int> operands;
  /// Positions in `operands` of the query, key, value and mask (-1: no mask).
  int query = -1, key_input = -1, value = -1, mask = -1;
  double scale = 0;     ///< the node's scale, or 1/sqrt(D)
};

/// Whether `group` holds a scaled_dot_product_attention node (the only generator for it): alone,
/// or followed by the attention_blind_rows node that reads its result over the same operands (a
/// decode step's, passes/fusion.h), whose blind rows the kernel then computes as
/// blind_rows_codegen.h's kernel does, the result written once.
bool has_attention(const ir::Graph& group);

/// Generates the kernel for `group` (a "group" graph whose types are the exact ones of this plan),
/// or returns why it cannot.
std::variant<AttentionKernel, std::string> generate_attention(const ir::Graph& group);

/// The kernel's single argument, as 8-byte words: batch, heads, rows, keys, row chunks, the scale
/// (a double's bits), then for the query, key, value, mask and output each its address and four
/// strides in elements over [B, H, R or S, D or S] (0 where the mask broadcasts; all 0 with no
/// mask). `operands` are in AttentionKernel order.
std::vector<std::int64_t> pack_attention_arguments(const AttentionKernel& kernel,
                                                   const std::vector<const DLTensor*>& operands);

/// Blocks of a launch whose packed arguments are `words`: batch x heads x row chunks.
std::int64_t attention_blocks(const std::vector<std::int64_t>& words);

/// Threads of every block.
constexpr int kAttentionThreads = 256;

}  // namespace zenith::cuda
