// Matrix products through cuBLASLt, with their bias and activation fused into cuBLASLt's epilogue:
// runs the MatmulPrograms of matmul_plan.h.
//
// Row-major C = A·B is computed as the column-major product Cᵀ = Bᵀ·Aᵀ: a row-major matrix is its
// own transpose in column-major terms, so no operand is copied whatever its layout.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include <cuda_runtime_api.h>
#include <dlpack/dlpack.h>

#include "backends/cuda/matmul_plan.h"

namespace zenith::cuda {

class CublasLtMatmul;

/// What one compiled product keeps between its launches for CublasLtMatmul::run: the output's
/// column count (the row-major output's rows: tokens, a sequence length) of its first launch, and
/// the algorithm it chose where a later launch had another. One per kernel a plan launches (a
/// symbolic plan launches one kernel at every size), owned by the caller, used by one
/// CublasLtMatmul; run guards it.
class MatmulHistory {
 public:
  MatmulHistory();
  ~MatmulHistory();
  MatmulHistory(const MatmulHistory&) = delete;
  MatmulHistory& operator=(const MatmulHistory&) = delete;

 private:
  friend class CublasLtMatmul;
  struct State;
  std::unique_ptr<State> state_;
};

/// Runs MatmulPrograms on one cuBLASLt handle. One per plugin context; run may be called from
/// several threads at once.
class CublasLtMatmul {
 public:
  /// Creates the cuBLASLt handle; throws std::runtime_error with cuBLAS's status on failure.
  CublasLtMatmul();
  /// Destroys the handle and every cached descriptor.
  ~CublasLtMatmul();
  CublasLtMatmul(const CublasLtMatmul&) = delete;
  CublasLtMatmul& operator=(const CublasLtMatmul&) = delete;

  /// Enqueues `program` on `stream`: `inputs` in the group's input order, `outputs` its single
  /// output (host-allocated, row-major contiguous). Sizes come from the tensors. Workspace comes
  /// from `allocate_workspace` (stream-ordered, e.g. PyTorch's caching allocator; nullptr means out
  /// of memory) and goes back through `free_workspace` right after enqueueing. Since the workspace
  /// adds to the peak of whatever runs the product, a launch is kept within matmul_workspace_bound
  /// (matmul_workspace_bound.h) where cuBLASLt allows: when the heuristic's pick asks for more, the
  /// same algorithm with fewer split-K splits, else the heuristic's pick with the bound on offer,
  /// else (nothing fits) the first pick and its workspace. Where `history` (the launching kernel's;
  /// nullptr for none) shows the product ran with another column count before, the heuristic's
  /// pick narrower along the columns stands in for its first (matmul_tile_choice.h), and later
  /// column counts reuse that algorithm without a heuristic query where cuBLASLt accepts it
  /// (varying_column_choices, narrower_tile_choices, reused_algorithms). The algorithm for each
  /// distinct problem (sizes, leading dims, batch strides, alignments, device; varying or not) is
  /// chosen once and cached. Never synchronizes. Empty outputs launch nothing; K == 0 writes the
  /// epilogue of the bias (or zeros). Throws std::runtime_error naming the failing call and its
  /// status, or the tensor that does not match the program.
  void run(const MatmulProgram& program, const std::vector<const DLTensor*>& inputs,
           const std::vector<const DLTensor*>& outputs, cudaStream_t stream,
           const std::function<void*(std::size_t)>& allocate_workspace,
           const std::function<void(void*)>& free_workspace, MatmulHistory* history = nullptr) const;

  /// Problems whose algorithm has been chosen so far.
  std::size_t cached_algorithms() const;
  /// Of those, the ones chosen for a kernel whose output's columns vary: its MatmulHistory had
  /// seen another column count.
  std::size_t varying_column_choices() const;
  /// Of those, the ones that asked the heuristic and took a tile narrower along the columns than
  /// its first pick's (matmul_tile_choice.h); the others kept its first pick.
  std::size_t narrower_tile_choices() const;
  /// Of the varying ones, those that reused the kernel's earlier choice for varying columns instead
  /// of a heuristic query (cuBLASLt accepted it for the new sizes).
  std::size_t reused_algorithms() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace zenith::cuda
