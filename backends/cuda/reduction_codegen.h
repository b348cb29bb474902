// CUDA C++ for a group that reduces or normalizes over its inner dimensions (sum, mean, amax,
// amin, var, std, softmax, log_softmax, layer_norm, and elementwise chains such as RMSNorm's
// pow-mean-add-rsqrt-mul around them): one kernel; each block works on one row at a time and the
// blocks stride over the rows.
//
// The group's values live in one of two domains. Full values have the row space's shape S (or
// broadcast to it); row values hold one number per row (a reduction's result and elementwise ops
// on such results). A reduction whose input needs k earlier reductions runs in phase k: the block
// sweeps its row once per phase, recomputing the elementwise prologue from the inputs rather than
// keeping it, then combines the partial results across the block. A last sweep writes the full
// outputs. Rows of at most 4,096 elements whose length is a multiple of four and whose contiguous
// operands are aligned take the vector path: each thread loads four consecutive elements at a
// time, once, into registers, and its elements of the other operands (a weight broadcast over
// rows) one at a time, also once and in the first sweep, before the first block reduction; the
// later sweeps read them there (see Generator::Reach).
// Everything is evaluated in float32, except that a float16 or bfloat16 value a reduction reads
// is rounded to its dtype where it is computed, as eager stores it: the reduction and every other
// reader then see eager's value (a softmax over float16 scores plus -65504 is decided by that
// rounding; relu(x - amax(x)) stays 0).
//
// Like the elementwise kernels, these are shape-generic: the key holds ranks, layout classes and
// broadcast patterns, never a size.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include <dlpack/dlpack.h>

#include "core/graph.h"

namespace zenith::cuda {

/// Bumped whenever generated code changes for the same key: part of every key.
constexpr int kReductionCodegenVersion = 7;

/// The row kernels' vector path: kRowVectorWidth consecutive elements a load or store, at most
/// kRowElementsPerThread elements a thread held in registers across the sweeps.
constexpr int kRowVectorWidth = 4;
constexpr int kRowElementsPerThread = 8;
/// The most threads a row kernel's block has (its launch bounds).
constexpr int kRowMaxThreads = 512;

/// A generated row kernel and what a launch needs to know about it.
struct ReductionKernel {
  std::string key;        ///< the shape class, canonical text (no value ids, no sizes)
  std::string name;       ///< "zenith_row_<hash of key>"
  std::string source;     ///< CUDA C++
  int rank = 1;           ///< rank of the row space S
  int inner_rank = 1;     ///< trailing dimensions of S that rows span
  bool index64 = false;   ///< 64-bit offsets
  /// Value ids of the parameters, in order: the group's inputs, then its outputs.
  std::vector<int> operands;
  /// Per operand: the dimension of S its first dimension lines up with (operand dimension d is S
  /// dimension d + dim_offset).
  std::vector<int> dim_offset;
};

/// Whether `group` holds a node the reduction generator handles and the elementwise one does not.
bool has_row_reduction(const ir::Graph& group);

/// Generates the kernel for `group` (a "group" graph whose types are the exact ones of this
/// plan), or returns why it cannot.
std::variant<ReductionKernel, std::string> generate_reduction(const ir::Graph& group);

/// The kernel's single argument, as 8-byte words: rows, row length (elements per row), sizes of S
/// [rank], then per operand its pointer and its strides over S [rank] in elements (0 where
/// broadcast or absent). `operands` are in ReductionKernel order.
std::vector<std::int64_t> pack_reduction_arguments(const ReductionKernel& kernel,
                                                   const std::vector<const DLTensor*>& operands);

}  // namespace zenith::cuda
