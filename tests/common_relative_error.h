// The error measure the acceptance criteria name: max |got - want| / max |want|.
#pragma once

#include <algorithm>
#include <limits>

#include <ATen/ATen.h>

namespace zenith::testing {

inline double relative_error(const at::Tensor& got, const at::Tensor& want) {
  auto scale = std::max(want.abs().max().item<double>(), 1e-12);
  return (got - want).abs().max().item<double>() / scale;
}

/// The same measure over the finite elements of `want` (in double), with NaN and infinity compared
/// by position (infinite when they differ): a random-weight network in float16 may overflow, and a
/// NaN must not hide a difference elsewhere. 0 when nothing is finite.
inline double relative_error_where_finite(const at::Tensor& got, const at::Tensor& want) {
  if (!at::equal(got.isnan(), want.isnan()) || !at::equal(got.isinf(), want.isinf())) {
    return std::numeric_limits<double>::infinity();
  }
  auto finite = want.isfinite();
  if (!finite.any().item<bool>()) return 0;
  return relative_error(got.masked_select(finite).to(at::kDouble), want.masked_select(finite).to(at::kDouble));
}

}  // namespace zenith::testing
