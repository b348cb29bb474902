// CUDA C++ for a group of elementwise nodes: one kernel that reads every input once, evaluates the
// whole chain in registers (in float32, whatever the storage type) and writes every output once.
//
// Kernels are shape-generic: sizes and strides are arguments, so the key (what changes the code)
// holds the ops and their constant arguments, dtypes, the iteration rank, each operand's layout
// class and broadcast pattern, the index width and whether the vector path exists, never a size.
// A new sequence length therefore reuses the kernel.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include <dlpack/dlpack.h>

#include "core/graph.h"

namespace zenith::cuda {

/// Bumped whenever generated code changes for the same key: part of every key.
constexpr int kElementwiseCodegenVersion = 7;

/// How one operand is laid out against the iteration space; decides its indexing code.
enum class OperandClass {
  Contiguous,  ///< same sizes as the iteration space, row-major contiguous: offset = linear index
  Scalar,      ///< one element broadcast everywhere: loaded once
  /// An input that varies along one dimension of the iteration space and is broadcast along the
  /// others (a per-channel scale or a bias): offset = coordinate along that dimension times its
  /// stride, one division and one remainder per element instead of the whole multi-index.
  Axis,
  Strided,     ///< anything else: offset from the multi-index and its strides (0 where broadcast)
};

/// A generated kernel and what a launch needs to know about it.
struct ElementwiseKernel {
  std::string key;          ///< the shape class, canonical text (no value ids, no sizes)
  std::string name;         ///< "zenith_ew_<hash of key>": deterministic, so is the source
  std::string source;       ///< CUDA C++
  int rank = 1;             ///< iteration rank (0-d groups run as rank 1)
  bool index64 = false;     ///< 64-bit offsets (some tensor passes 2^31 elements or offsets)
  /// Has the 16-byte vector path: one dtype, outputs contiguous, inputs contiguous, scalar or
  /// along one axis. With axis inputs it runs only when the launch's sizes keep each vector inside
  /// one coordinate of a non-innermost axis, or aligned to the vector width along an innermost one
  /// that is contiguous, read as one 16-byte load (pack_arguments sets flags bit 1;
  /// takes_vector_path).
  bool vectorized = false;
  int vector_width = 1;     ///< elements per 16 bytes on that path
  /// Value ids of the parameters, in order: the group's inputs, then its outputs.
  std::vector<int> operands;
  std::vector<OperandClass> classes;
  /// Per operand: the dimension of the kernel's index space an Axis operand varies along, else -1.
  std::vector<int> axes;
  /// The operand (an output) whose shape is the iteration space; every other output broadcasts
  /// to it and is stored once per element of its own, from the iteration with 0 in its broadcast
  /// dimensions.
  int shape_operand = 0;
  /// The iteration order: dimension j of the kernel's index space is dimension order[j] of the
  /// (right-aligned) tensors, the shape operand's memory order; empty when that is row-major. The
  /// code is the same for every order, so groups of one key share it; launches apply their own.
  std::vector<int> order;
  /// A relayout (an input of the output's shape is row-major, the output is not, as a weight copied
  /// channels-last): the kernel iterates in row-major order, each thread over one run of the
  /// elements after this dimension (of the kernel's index space, their product being the run),
  /// and a launch has one thread a run (where the run at its sizes is within bounds:
  /// takes_run_path). -1: one element a thread, in `order`.
  int run_dimension = -1;
};

/// Generates the kernel for `group` (a "group" graph whose types are the exact ones of this plan),
/// or returns why it cannot (an op it does not know, a dtype other than float32, float16, bfloat16
/// and bool, an output that does not broadcast to the largest one, an in-place output, tensors
/// on more than one device or not on CUDA).
std::variant<ElementwiseKernel, std::string> generate_elementwise(const ir::Graph& group);

/// The kernel's single argument, as 8-byte words: numel, flags (bit 0: every pointer is 16-byte
/// aligned; bit 1: every Axis operand fits the vector path at these sizes; bit 2: a relayout's run
/// is within its bounds at these sizes), sizes[rank], then per operand its pointer and its
/// strides[rank] in elements, broadcast dimensions as 0. `operands` are in ElementwiseKernel
/// order; their shapes must be the plan's.
std::vector<std::int64_t> pack_arguments(const ElementwiseKernel& kernel, const std::vector<const DLTensor*>& operands);

/// Whether a launch with these packed `flags` (pack_arguments' second word) runs the vector path.
bool takes_vector_path(const ElementwiseKernel& kernel, std::int64_t flags);

/// A relayout kernel's run at a launch: the product of the sizes after its run dimension, from
/// pack_arguments' words.
std::int64_t relayout_run(const ElementwiseKernel& kernel, const std::vector<std::int64_t>& words);

/// Whether a launch with these packed `flags` walks runs (flags bit 2: a relayout kernel whose run
/// at these sizes is within its bounds), one thread a run; else one thread an element.
bool takes_run_path(const ElementwiseKernel& kernel, std::int64_t flags);

}  // namespace zenith::cuda
