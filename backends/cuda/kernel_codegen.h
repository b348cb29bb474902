// The code generators' one entry point: a fused group in, one CUDA C++ kernel out. Groups of
// elementwise nodes go to elementwise_codegen; groups that reduce or normalize over their inner
// dimensions go to reduction_codegen; an attention node with a decode step's few queries goes to
// attention_codegen, an attention_blind_rows node to blind_rows_codegen, a max_pool2d node to
// pool_codegen, an index_copy_ node (a static KV cache's write) to index_copy_codegen.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include <dlpack/dlpack.h>

#include "backends/cuda/attention_codegen.h"
#include "backends/cuda/blind_rows_codegen.h"
#include "backends/cuda/elementwise_codegen.h"
#include "backends/cuda/index_copy_codegen.h"
#include "backends/cuda/pool_codegen.h"
#include "backends/cuda/reduction_codegen.h"
#include "core/graph.h"

namespace zenith::cuda {

/// A generated kernel of any kind.
struct GeneratedKernel {
  std::variant<ElementwiseKernel, ReductionKernel, AttentionKernel, BlindRowsKernel, PoolKernel, IndexCopyKernel> kernel;

  /// The shape class, canonical text: no value ids, no sizes.
  const std::string& key() const;
  /// "zenith_<kind>_<hash of key>": deterministic, so is the source.
  const std::string& name() const;
  /// CUDA C++.
  const std::string& source() const;
  /// Value ids of the kernel's tensors, in launch order: the group's inputs, then its outputs.
  const std::vector<int>& operands() const;
  /// The kernel computes offsets in 64 bits; otherwise it serves at most kMax32BitExtent elements.
  bool index64() const;
  /// The kernel reads nothing before it has waited for the kernel before it (zn_follow_kernel_before,
  /// its first statement), so it may be launched as a programmatic dependent launch: every kind but
  /// the max pool.
  bool follows_kernel_before() const;
};

/// Generates the kernel for `group` (a "group" graph whose types are the exact ones of this plan)
/// with the generator its nodes call for, or returns why it cannot.
std::variant<GeneratedKernel, std::string> generate_kernel(const ir::Graph& group);

/// Grid and block of one launch, and its single argument as 8-byte words.
struct LaunchConfig {
  std::vector<std::int64_t> words;
  std::int64_t blocks = 0;  ///< 0: nothing to do
  int threads = 0;
};

/// Packs the launch of `kernel` over `operands` (in operands() order, with the plan's ranks) for a
/// device with `multiprocessors` SMs.
LaunchConfig launch_config(const GeneratedKernel& kernel, const std::vector<const DLTensor*>& operands,
                           int multiprocessors);

}  // namespace zenith::cuda
