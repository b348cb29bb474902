// Matrix geometry, shared by matmul planning (IR types) and running (DLTensors) so both read a
// tensor the same way: how a tensor's dims fold into batches, rows and columns, and in which
// order and with which leading dimension cuBLASLt can address it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <c10/core/ScalarType.h>
#include <dlpack/dlpack.h>

#include "backends/cuda/matmul_plan.h"

namespace zenith::cuda {

/// One dimension, or several folded into one: `count` entries `stride` elements apart.
struct Axis {
  std::int64_t count = 1;
  std::int64_t stride = 0;
};

/// Dims [begin, end) as one axis, or nullopt when their entries are not equally spaced. Size-1
/// dims are skipped (their stride is meaningless); an empty range is one entry.
std::optional<Axis> fold(const std::int64_t* sizes, const std::int64_t* strides, int begin, int end);

/// A tensor read as `batch` matrices of rows × cols.
struct MatrixView {
  Axis batch;
  Axis rows;
  Axis cols;
};

/// How the product reads a tensor: its last dim is columns; with FoldIntoRows every other dim is
/// rows, with Batch the dim before the last is rows and the rest are the batch. `transposed` swaps
/// rows and columns (linear's weight holds Bᵀ). nullopt when leading dims do not fold.
std::optional<MatrixView> view_matrices(const std::int64_t* sizes, const std::int64_t* strides, int rank,
                                        LeadingDims leading, bool transposed);

/// Whether the matrices have `order` with a leading dimension cuBLASLt accepts (at least the
/// column-major row count, so columns never overlap). Size-1 dims fit any stride.
bool fits(MatrixOrder order, const MatrixView& m);

/// Row-major first: a contiguous matrix fits both orders only when it is a single row or column.
std::optional<MatrixOrder> order_of(const MatrixView& m);

/// The leading dimension for cuBLASLt. With a single row (column) the stride is never used and
/// may be anything, but cuBLASLt still demands ld >= its row count, so it is replaced.
std::int64_t leading_dimension(MatrixOrder order, const MatrixView& m);

/// PyTorch's rule: size-1 dims may have any stride, and an empty tensor is contiguous whatever
/// its strides ([7, 0] gets strides [1, 1]).
bool is_contiguous(const std::int64_t* sizes, const std::int64_t* strides, int rank);

/// A DLTensor's sizes and strides (compact row-major when DLPack leaves strides out).
struct Dims {
  std::vector<std::int64_t> sizes;
  std::vector<std::int64_t> strides;
  int rank() const { return static_cast<int>(sizes.size()); }
};

/// The sizes and strides of `t`.
Dims dims_of(const DLTensor& t);

/// Whether `dims` hold `n` elements one apart (a bias of N: [N], [1, N], ...).
bool is_packed_vector(const Dims& dims, std::int64_t n);

/// Where `t`'s first element lies (data plus byte_offset).
void* address(const DLTensor& t);

/// Whether `t` holds elements of `dtype` (float32, float16 or bfloat16), one lane each.
bool has_dtype(const DLTensor& t, c10::ScalarType dtype);

/// Bytes per element of a matrix product's dtype: 4 for float32, 2 for float16 and bfloat16.
std::int64_t element_size(c10::ScalarType dtype);

/// "row-major" or "column-major".
const char* order_name(MatrixOrder order);

/// "[2, 3]", for messages.
std::string shape_text(const std::vector<std::int64_t>& sizes);

}  // namespace zenith::cuda
