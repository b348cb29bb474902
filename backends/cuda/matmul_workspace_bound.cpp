#include "backends/cuda/matmul_workspace_bound.h"

#include <algorithm>

namespace zenith::cuda {

std::uint64_t matmul_workspace_bound(std::uint64_t out_bytes, std::uint64_t first_bytes, std::uint64_t second_bytes) {
  const std::uint64_t reference = std::max(out_bytes, std::min(first_bytes, second_bytes));
  // Halved before the comparison rather than doubled after it: no overflow for any size.
  if (reference >= kMaxMatmulWorkspaceBytes / 2) return kMaxMatmulWorkspaceBytes;
  return std::max(2 * reference, kMinMatmulWorkspaceBytes);
}

}  // namespace zenith::cuda
