// The JIT CUDA backend's code generators over a whole optimized graph, without a GPU: every group
// partitioning would offer the backend (each fusion group whole, each other kernel candidate alone)
// gets a kernel or a reason, and every kernel compiles with NVRTC for sm_90. Shared by the random
// programs' and the real models' compile checks (tests/cuda).
#pragma once

#include <map>
#include <set>
#include <string>

#include "core/graph.h"

namespace zenith::testing {

/// What a graph's groups came to, summed over every graph checked with one tally.
struct KernelTally {
  int fusion_groups = 0;     ///< element-wise and row groups, offered to the generators
  int fusion_generated = 0;
  /// Fusion groups declined that hold integer values (generated kernels compute in floating point
  /// and bool): partitioning splits them back into single nodes, which the PyTorch backend runs.
  int integer_groups_declined = 0;
  /// Groups rooted at a matrix product: cuBLASLt's, not the generators' (passes/matmul_epilogue.h).
  int matmul_groups = 0;
  int singles = 0;
  int singles_generated = 0;
  /// Of the single nodes, scaled_dot_product_attention ones, and those given a kernel (a decode
  /// step's few queries; prompts stay on PyTorch's fused kernels).
  int attention_singles = 0;
  int attention_generated = 0;
  double nvrtc_seconds = 0;
  /// Reason -> how often, and the first group that gave it (and where).
  struct Declined {
    int count = 0;
    std::string where;
    std::string group;
  };
  std::map<std::string, Declined> declined_groups;
  std::map<std::string, Declined> declined_singles;
  /// Kernel keys compiled so far: a kernel shared by graphs compiles once.
  std::set<std::string> compiled;

  /// One summary line and each declined reason with its first group, for the test's output.
  std::string to_string() const;
};

/// Retypes `graph` (captured on the CPU) to CUDA as a capture of CUDA tensors would have typed it,
/// optimizes it with the default pipeline, offers its groups to the code generators and compiles
/// every new kernel. An NVRTC rejection is a test failure naming `where`, the group and the source.
void check_cuda_kernels(ir::Graph graph, const std::string& where, KernelTally& tally);

}  // namespace zenith::testing
