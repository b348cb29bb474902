// The error measure the acceptance criteria name: max |got - want| / max |want|.
#pragma once

#include <algorithm>

#include <ATen/ATen.h>

namespace zenith::testing {

inline double relative_error(const at::Tensor& got, const at::Tensor& want) {
  auto scale = std::max(want.abs().max().item<double>(), 1e-12);
  return (got - want).abs().max().item<double>() / scale;
}

}  // namespace zenith::testing
