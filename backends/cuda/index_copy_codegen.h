// aten::index_copy_ as one generated kernel: a decode step writes its new keys and values into a
// static KV cache so (cache.index_copy_(2, positions, k)). PyTorch's kernel for it took 1.75 us of
// a 256-element copy on an H200 (bench_inference_profile --model llama, two a layer, 0.077 ms of a
// 1.2 ms step, 2026-11-28), and as a library kernel it cannot be dispatched while the kernel before
// it ends (backends/cuda/programmatic_launch.h); this one can.
//
// A thread per element of the source, grid-striding: it finds the element's coordinates, reads
// the index at its coordinate along `dim`, and copies the element's bytes to that place of the
// tensor written (any strides, its own and the source's). An index outside the written tensor's
// size stops the kernel with a trap, as PyTorch's device assert does; repeated indices leave one
// of their sources there, unspecified which, as in PyTorch. The element is copied as its bytes,
// so every dtype of 1, 2, 4 or 8 bytes is served.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include <dlpack/dlpack.h>

#include "core/graph.h"

namespace zenith::cuda {

/// Bumped whenever generated code changes for the same key: part of every key.
constexpr int kIndexCopyCodegenVersion = 1;

/// Threads of every block.
constexpr int kIndexCopyThreads = 128;

/// Dimensions of the largest tensor the kernel writes.
constexpr int kIndexCopyMaxRank = 6;

/// A generated index-copy kernel and what a launch needs to know about it.
struct IndexCopyKernel {
  std::string key;       ///< element size, rank, dim and index width, canonical text (no sizes)
  std::string name;      ///< "zenith_index_copy_<hash of key>"
  std::string source;    ///< CUDA C++
  bool index64 = false;  ///< offsets in 64 bits (an operand spans more than kMax32BitExtent elements)
  /// Value ids of the kernel's tensors, in launch order: the group's inputs, then its output (a
  /// view of the tensor written, when the group has one).
  std::vector<int> operands;
  int self = -1, index = -1, source_tensor = -1;  ///< positions in `operands`
  int rank = 0, dim = 0;
};

/// Whether `group` holds an aten::index_copy_ node (the only generator for it).
bool has_index_copy(const ir::Graph& group);

/// Generates the kernel for `group` (one aten::index_copy_ node whose tensor written, index and
/// source are the group's inputs, typed as in this plan), or returns why it cannot.
std::variant<IndexCopyKernel, std::string> generate_index_copy(const ir::Graph& group);

/// The kernel's single argument, as 8-byte words: the source's element count, the written tensor's
/// size along dim, the index's address and stride, then the source's address, its sizes and
/// strides, then the written tensor's address and strides (rank entries each, in elements).
/// `operands` are in IndexCopyKernel order.
std::vector<std::int64_t> pack_index_copy_arguments(const IndexCopyKernel& kernel,
                                                    const std::vector<const DLTensor*>& operands);

}  // namespace zenith::cuda
