#include "backends/cuda/matrix_geometry.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace zenith::cuda {

Dims dims_of(const DLTensor& t) {
  Dims dims;
  dims.sizes.assign(t.shape, t.shape + t.ndim);
  if (t.strides != nullptr) {
    dims.strides.assign(t.strides, t.strides + t.ndim);
  } else {
    dims.strides.assign(static_cast<std::size_t>(t.ndim), 1);
    for (int d = t.ndim - 2; d >= 0; --d) dims.strides[d] = dims.strides[d + 1] * std::max<std::int64_t>(t.shape[d + 1], 1);
  }
  return dims;
}

bool is_packed_vector(const Dims& dims, std::int64_t n) {
  std::int64_t count = 1;
  for (auto s : dims.sizes) count *= s;
  return count == n && (n <= 1 || dims.strides.back() == 1);
}

void* address(const DLTensor& t) { return static_cast<char*>(t.data) + t.byte_offset; }

bool has_dtype(const DLTensor& t, c10::ScalarType dtype) {
  const std::uint8_t code = dtype == c10::ScalarType::BFloat16 ? kDLBfloat : kDLFloat;
  const std::uint8_t bits = dtype == c10::ScalarType::Float ? 32 : 16;
  return t.dtype.code == code && t.dtype.bits == bits && t.dtype.lanes == 1;
}

std::int64_t element_size(c10::ScalarType dtype) { return dtype == c10::ScalarType::Float ? 4 : 2; }

std::optional<Axis> fold(const std::int64_t* sizes, const std::int64_t* strides, int begin, int end) {
  Axis axis;
  int inner = -1;
  bool equally_spaced = true;
  for (int d = end - 1; d >= begin; --d) {
    if (sizes[d] == 1) continue;
    axis.count *= sizes[d];
    if (inner < 0) axis.stride = strides[d];
    else if (strides[d] != strides[inner] * sizes[inner]) equally_spaced = false;
    inner = d;
  }
  if (!equally_spaced && axis.count != 0) return std::nullopt;
  return axis;
}

std::optional<MatrixView> view_matrices(const std::int64_t* sizes, const std::int64_t* strides, int rank,
                                        LeadingDims leading, bool transposed) {
  MatrixView view;
  view.cols = Axis{sizes[rank - 1], strides[rank - 1]};
  if (leading == LeadingDims::Batch) {
    auto batch = fold(sizes, strides, 0, rank - 2);
    if (!batch) return std::nullopt;
    view.batch = *batch;
    view.rows = Axis{sizes[rank - 2], strides[rank - 2]};
  } else {
    auto rows = fold(sizes, strides, 0, rank - 1);
    if (!rows) return std::nullopt;
    view.rows = *rows;
  }
  if (transposed) std::swap(view.rows, view.cols);
  return view;
}

bool fits(MatrixOrder order, const MatrixView& m) {
  const auto rows = m.rows.count, cols = m.cols.count;
  if (order == MatrixOrder::RowMajor) {
    return (cols <= 1 || m.cols.stride == 1) && (rows <= 1 || m.rows.stride >= std::max<std::int64_t>(cols, 1));
  }
  return (rows <= 1 || m.rows.stride == 1) && (cols <= 1 || m.cols.stride >= std::max<std::int64_t>(rows, 1));
}

std::optional<MatrixOrder> order_of(const MatrixView& m) {
  if (fits(MatrixOrder::RowMajor, m)) return MatrixOrder::RowMajor;
  if (fits(MatrixOrder::ColumnMajor, m)) return MatrixOrder::ColumnMajor;
  return std::nullopt;
}

std::int64_t leading_dimension(MatrixOrder order, const MatrixView& m) {
  if (order == MatrixOrder::RowMajor) return m.rows.count <= 1 ? std::max<std::int64_t>(m.cols.count, 1) : m.rows.stride;
  return m.cols.count <= 1 ? std::max<std::int64_t>(m.rows.count, 1) : m.cols.stride;
}

bool is_contiguous(const std::int64_t* sizes, const std::int64_t* strides, int rank) {
  if (std::find(sizes, sizes + rank, 0) != sizes + rank) return true;
  std::int64_t expected = 1;
  for (int d = rank - 1; d >= 0; --d) {
    if (sizes[d] != 1 && strides[d] != expected) return false;
    expected *= sizes[d];
  }
  return true;
}

const char* order_name(MatrixOrder order) { return order == MatrixOrder::RowMajor ? "row-major" : "column-major"; }

std::string shape_text(const std::vector<std::int64_t>& sizes) { return fmt::format("[{}]", fmt::join(sizes, ", ")); }

}  // namespace zenith::cuda
