// matmul_workspace_bound (backends/cuda/matmul_workspace_bound.h): the workspace a cuBLASLt
// product may take, from its output's and operands' bytes. Pure arithmetic, no GPU.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

#include "backends/cuda/matmul_workspace_bound.h"

namespace zenith::cuda {
namespace {

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;

// Bytes of a float32 M x N output and its M x K and K x N operands.
struct Product {
  std::uint64_t m, n, k;
  std::uint64_t out() const { return m * n * 4; }
  std::uint64_t first() const { return m * k * 4; }
  std::uint64_t second() const { return k * n * 4; }
};

std::uint64_t bound(const Product& p) { return matmul_workspace_bound(p.out(), p.first(), p.second()); }
std::uint64_t bound(std::uint64_t m, std::uint64_t n, std::uint64_t k) { return bound(Product{m, n, k}); }

// BERT-base b1 float32's four products (128 tokens) are where cuBLASLt's heuristic asked for 4 to
// 6 MiB and the graph capture's peak came to 9.1 MB against eager's 5.9: each is bounded by the
// floor, which admits two splits of the widest output (128 x 3072, 1.5 MiB).
TEST(MatmulWorkspaceBound, BatchOneProductsGetTheFloor) {
  for (const Product& p : {Product{128, 2304, 768}, Product{128, 768, 768}, Product{128, 3072, 768},
                           Product{128, 768, 3072}}) {
    EXPECT_EQ(bound(p), 3 * kMiB) << p.m << "x" << p.n << "x" << p.k;
  }
  const Product widest{128, 3072, 768};
  EXPECT_EQ(kMinMatmulWorkspaceBytes, 2 * widest.out());
}

// A weight gradient (dW = dY^T X over 4096 rows) has a small output and a long inner dimension,
// where split-K pays: its smaller operand (768 x 4096) sets the bound, not its 2.25-MiB output.
// With the output alone setting it (4.5 MiB), BERT-base training in float32 took 50.5 ms a step
// against 45.3 before any bound (docs/performance.md).
TEST(MatmulWorkspaceBound, ALongInnerDimensionIsBoundedByTheSmallerOperand) {
  EXPECT_EQ(bound(768, 768, 4096), 24 * kMiB);
  EXPECT_EQ(bound(3072, 768, 4096), 24 * kMiB);
  // The smaller operand, not the larger: a batch-1 product's weight does not raise its bound.
  EXPECT_EQ(matmul_workspace_bound(1 * kMiB, 64 * kMiB, 2 * kMiB), 4 * kMiB);
}

TEST(MatmulWorkspaceBound, LargeOutputsGetTwiceTheirBytesUpToTheCeiling) {
  EXPECT_EQ(bound(4096, 768, 3072), 24 * kMiB);  // BERT-base b32's feed-forward down
  EXPECT_EQ(bound(4096, 2304, 768), kMaxMatmulWorkspaceBytes);
  EXPECT_EQ(matmul_workspace_bound(16 * kMiB - 1, 0, 0), 32 * kMiB - 2);
  EXPECT_EQ(matmul_workspace_bound(16 * kMiB, 0, 0), kMaxMatmulWorkspaceBytes);
}

TEST(MatmulWorkspaceBound, EmptyAndHugeSizesStayWithinTheLimits) {
  EXPECT_EQ(matmul_workspace_bound(0, 0, 0), kMinMatmulWorkspaceBytes);
  const auto most = std::numeric_limits<std::uint64_t>::max();
  EXPECT_EQ(matmul_workspace_bound(most, most, most), kMaxMatmulWorkspaceBytes);  // no overflow
  EXPECT_EQ(matmul_workspace_bound(0, most, 1), kMinMatmulWorkspaceBytes);
}

}  // namespace
}  // namespace zenith::cuda
