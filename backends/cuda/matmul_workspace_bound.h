// How much workspace one cuBLASLt product may take. The JIT CUDA plugin allocates a product's
// workspace for its launch and frees it once the launch is queued, so the workspace adds to the
// peak of whatever plan or CUDA graph capture runs the product, where eager PyTorch's products
// use cuBLAS's persistent workspace, made once per process.
#pragma once

#include <cstdint>

namespace zenith::cuda {

/// The least a product may use whatever its sizes: two splits of the partial sums of
/// BERT-base b1's widest float32 output (128 x 3072).
inline constexpr std::uint64_t kMinMatmulWorkspaceBytes = std::uint64_t{3} << 20;
/// The most a product is ever offered: what cuBLAS recommends for Hopper.
inline constexpr std::uint64_t kMaxMatmulWorkspaceBytes = std::uint64_t{32} << 20;

/// The workspace bound of a product with an output of `out_bytes` and operands of `first_bytes`
/// and `second_bytes` (each over every batch): twice the larger of the output and the smaller
/// operand, within [kMinMatmulWorkspaceBytes, kMaxMatmulWorkspaceBytes].
///
/// Why those two: split-K's partial sums take a split count times the output, and splitting pays
/// where the inner dimension is long beside the output, which is where the smaller operand
/// (M x K or K x N) outweighs the output (M x N). A weight gradient (768 x 768 over 4096 rows) may
/// then split as the heuristic likes (24 MiB), while a batch-1 product, whose large operand is its
/// weight, stays within a few MiB: BERT-base b1 float32's products get 3 MiB, and its graph
/// capture's peak fell from 9.1 to 6.1 MB against eager's 5.9 (docs/performance.md).
std::uint64_t matmul_workspace_bound(std::uint64_t out_bytes, std::uint64_t first_bytes, std::uint64_t second_bytes);

}  // namespace zenith::cuda
