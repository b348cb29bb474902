// Matrix products of one row (a decode step at batch 1: one token's activations times every
// weight matrix) as one generated kernel that streams the weight once, instead of cuBLASLt's tiled
// kernels, which are built for many rows and read the weight more slowly when there is one. For
// linear's form only: out[n] = epilogue(sum_k a[k] * w[n, k] + bias[n]), the weight [N, K]
// row-major as nn.Linear holds it (passed as such, or as its transpose to matmul, which is how a
// traced linear reaches the plan). With more rows cuBLASLt runs the product: at eight rows this
// kernel (each weight chunk multiplied into every row) measured 15.4 us against cuBLAS's 6.7 for
// 2048 x 2048 (bench_inference_profile --model linears --batch 8, H200, 2026-11-28).
//
// Each output element's dot product is split over 1 to 4 warps of a 128-thread block (more warps
// per element when N is small, so that the device still has enough warps at work); each lane
// reads 16 bytes of a weight row at a time and accumulates in float32; the warps' partial sums
// meet in shared memory, and the bias and activation are applied before the one rounding to the
// output's dtype.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>
#include <dlpack/dlpack.h>

#include "backends/cuda/matmul_plan.h"
#include "core/graph.h"

namespace zenith::cuda {

/// The largest weight the kernel takes; larger ones go to cuBLASLt. Measured on an H200 at one
/// float16 row, each product launched back to back over copies of its weight in one CUDA graph, so
/// that every launch reads its weight from device memory as a decode step does (the microbenchmark
/// of docs/performance.md, 2026-11-28): the kernel took 4.6 us for 2560 x 2048 against cuBLAS's
/// 5.9, 4.1 against 5.7 for 2048 x 2048, 12.4 against 13.4 for 11264 x 2048, 8.4 against 10.2 for
/// 2048 x 5632 and 32.2 against 34.5 for 32000 x 2048 (131 MB). Nothing larger was measured.
constexpr std::int64_t kMatrixVectorMaxWeightBytes = std::int64_t{256} << 20;

/// Whether `program` has linear's form (A's leading dims folded into rows, B a 2-D tensor read as
/// [K, N] with unit stride along K: a row-major [N, K] weight), for which the kernel exists;
/// whether a launch fits is matrix_vector_fit's.
bool has_matrix_vector_form(const MatmulProgram& program);

/// Whether a launch of `program` planned from `group` can ever fit the kernel: the form, A of one
/// row, and B (a parameter, whose size every launch shares) within kMatrixVectorMaxWeightBytes. The
/// plugin builds the kernel only then: otherwise every launch would go to cuBLASLt anyway.
bool matrix_vector_may_serve(const MatmulProgram& program, const ir::Graph& group);

/// The kernel's extern "C" name for `program`'s dtype, bias and epilogue.
std::string matrix_vector_name(const MatmulProgram& program);

/// The kernel's whole translation unit (NVRTC), for `program`'s dtype, bias and epilogue.
std::string matrix_vector_source(const MatmulProgram& program);

/// One launch: the operands' addresses and what the kernel reads them with.
struct MatrixVectorLaunch {
  const void* a = nullptr;     ///< A's one row, unit stride along K
  const void* w = nullptr;     ///< the weight [N, K], rows ldw elements apart, unit stride along K
  std::int64_t ldw = 0;
  const void* bias = nullptr;  ///< [N] packed, or null
  void* out = nullptr;         ///< [1, N] contiguous
  std::int64_t n = 0, k = 0;
  int element_bytes = 0;       ///< of the program's dtype
};

/// The launch for these tensors (the group's inputs in order, its one output), or nullopt when
/// the kernel does not serve them and cuBLASLt should: a form without the kernel, no rows or
/// columns, more than one row of A, a weight above kMatrixVectorMaxWeightBytes, K of 0 or not a multiple of 16 bytes' worth of
/// elements, a leading dimension or address not 16-byte aligned, a non-unit stride along K, an
/// output that is not row-major contiguous, a bias that is not a packed [N] vector, or a dtype
/// other than the program's. Reads only the tensors' descriptions, never their data.
std::optional<MatrixVectorLaunch> matrix_vector_fit(const MatmulProgram& program,
                                                    const std::vector<const DLTensor*>& inputs,
                                                    const std::vector<const DLTensor*>& outputs);

/// Warps of a block that share one output element: the fewest (1, 2 or 4) that put at least 16
/// warps on each multiprocessor, but never more than K's 16-byte chunks per lane allow.
int matrix_vector_warps_per_element(std::int64_t n, std::int64_t k, int element_bytes, int multiprocessors);

/// Enqueues the kernel (`function`, loaded from matrix_vector_source's binary) for `launch` on
/// `stream`; with `early`, as a programmatic dependent launch (programmatic_launch.h), which the
/// caller asks for only when the weight is read-only for the plan and the stream is being captured
/// into the plan's graph. Throws std::runtime_error with CUDA's message when the launch fails.
void launch_matrix_vector(const void* function, const MatrixVectorLaunch& launch, int multiprocessors,
                          cudaStream_t stream, bool early);

}  // namespace zenith::cuda
