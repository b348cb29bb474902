// aten::max_pool2d as one generated kernel. PyTorch's CUDA max pooling finds the index of every
// maximum too (max_pool2d goes through max_pool2d_with_indices, 8 bytes written an output element
// beside the value): ResNet-50's pool after its first convolution took 0.22 ms of a batch-64
// float16 call on an H100 (bench_inference_profile, 2026-11-27), about five times what its value
// bytes take at the card's bandwidth.
//
// A thread per output element, or per 16 bytes of channels where the channels are innermost in
// memory (channels-last), their count a multiple of a vector and every address and stride aligned
// to one (checked per launch; otherwise the element path). It walks its window (kernel size,
// stride, padding and dilation are constants of the source) and keeps the largest value; NaN wins
// as in PyTorch, so a window holding NaN gives NaN; padding is never read. Threads run along the
// output's innermost dimension, channels or width, so that their loads and stores coalesce; the
// output is written in its own strides.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include <dlpack/dlpack.h>

#include "core/graph.h"

namespace zenith::cuda {

/// Bumped whenever generated code changes for the same key: part of every key.
constexpr int kPoolCodegenVersion = 1;

/// Threads of every block.
constexpr int kPoolThreads = 256;

/// A generated pooling kernel and what a launch needs to know about it.
struct PoolKernel {
  std::string key;       ///< dtype, window, layout and index width, canonical text (no sizes)
  std::string name;      ///< "zenith_pool_<hash of key>"
  std::string source;    ///< CUDA C++
  bool index64 = false;  ///< offsets in 64 bits (a tensor of more than kMax32BitExtent elements)
  /// Value ids of the parameters, in order: the pooled input, then the output.
  std::vector<int> operands;
  /// The output's channels are innermost in memory: threads run along channels, 16 bytes at a
  /// time where a launch's operands allow it; otherwise along the width, an element each.
  bool channels_innermost = false;
  int vector_width = 1;  ///< elements of the dtype in 16 bytes
};

/// Whether `group` holds an aten::max_pool2d node (the only generator for it).
bool has_max_pool(const ir::Graph& group);

/// Generates the kernel for `group` (one aten::max_pool2d node over a rank-4 tensor, typed as in
/// this plan), or returns why it cannot.
std::variant<PoolKernel, std::string> generate_max_pool(const ir::Graph& group);

/// The kernel's single argument, as 8-byte words: batch, channels, height, width, output height,
/// output width, 1 when this launch takes the 16-byte path (else 0), then for the input and the
/// output each its address and four strides in elements over [N, C, H, W] (0 where the size is 1).
/// `operands` are in PoolKernel order.
std::vector<std::int64_t> pack_pool_arguments(const PoolKernel& kernel, const std::vector<const DLTensor*>& operands);

/// The work items of a launch whose packed arguments are `words`: output elements, or output
/// vectors on the 16-byte path.
std::int64_t pool_work_items(const PoolKernel& kernel, const std::vector<std::int64_t>& words);

}  // namespace zenith::cuda
