// zenith::attention_blind_rows (core/attention_blind_rows.h) as one generated kernel: a fused
// attention's result, with the rows whose every key the additive mask hides computed again as the
// model wrote attention out.
//
// A warp per query row: it reads the mask's row and takes its largest entry. At or above the
// limit (every row of a padding mask without a fully padded sequence, every decode step) it copies
// the row of the fused result and is done: the kernel is then a pass over the mask and the result.
// Below it the warp computes the row as eager does, in three sweeps over the keys: each logit is
// the product of query and key rounded to the dtype, times the scale rounded, plus the mask
// rounded (float16 rounds -65504 plus a score to a multiple of 32); their maximum; the sum of
// exp(logit - maximum); then the probabilities, rounded to the dtype, times the values, summed in
// float32. The logits are computed again in each sweep rather than held: such rows are rare and
// their number unbounded, and the kernel keeps no per-key storage.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include <dlpack/dlpack.h>

#include "core/graph.h"

namespace zenith::cuda {

/// Bumped whenever generated code changes for the same key: part of every key.
constexpr int kBlindRowsCodegenVersion = 5;

/// Threads of every block: a warp per query row, eight rows a block.
constexpr int kBlindRowsThreads = 256;

/// A generated blind-rows kernel and what a launch needs to know about it.
struct BlindRowsKernel {
  std::string key;      ///< dtype and head dimensions, canonical text (no sizes)
  std::string name;     ///< "zenith_blind_<hash of key>"
  std::string source;   ///< CUDA C++
  bool index64 = true;  ///< offsets are always 64-bit
  /// Value ids of the parameters, in order: the group's inputs, then its output.
  std::vector<int> operands;
  /// Positions in `operands` of the fused attention's result, the query, key, value and mask.
  int attention = -1, query = -1, key_input = -1, value = -1, mask = -1;
  double scale = 0;  ///< the node's scale
};

/// The device code with which a warp computes one blind row as the model wrote attention out
/// (`zn_blind_row` over a `ZnBlindRow`), for a kernel that defines T, D, DV, NV and ROUND(x) before
/// it and includes the device prelude: this op's kernel, and the decode attention's, which computes
/// the blind rows of its own result.
const char* blind_row_device_code();

/// Whether `group` holds an attention_blind_rows node (the only generator for it).
bool has_blind_rows(const ir::Graph& group);

/// Generates the kernel for `group` (one attention_blind_rows node, typed as in this plan), or
/// returns why it cannot.
std::variant<BlindRowsKernel, std::string> generate_blind_rows(const ir::Graph& group);

/// The kernel's single argument, as 8-byte words: batch, heads, rows, keys, the scale (a double's
/// bits), then for the fused result, query, key, value, mask and output each its address and four
/// strides in elements over [B, H, T or S, D or S] (0 where it broadcasts). `operands` are in
/// BlindRowsKernel order.
std::vector<std::int64_t> pack_blind_rows_arguments(const BlindRowsKernel& kernel,
                                                    const std::vector<const DLTensor*>& operands);

/// Blocks of a launch whose packed arguments are `words`: one warp per (batch, head, row).
std::int64_t blind_rows_blocks(const std::vector<std::int64_t>& words);

}  // namespace zenith::cuda
