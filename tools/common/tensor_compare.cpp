#include "common/tensor_compare.h"

#include <cmath>

#include <ATen/ATen.h>
#include <fmt/format.h>

namespace zenith::tools {
namespace {

std::string mismatch_of_metadata(const at::Tensor& actual, const at::Tensor& expected) {
  if (!actual.defined() || !expected.defined()) return "an output is missing (undefined tensor)";
  if (actual.sizes() != expected.sizes()) {
    return fmt::format("shape {} differs from the reference's {}", c10::str(actual.sizes()), c10::str(expected.sizes()));
  }
  if (actual.scalar_type() != expected.scalar_type()) {
    return fmt::format("dtype {} differs from the reference's {}", c10::toString(actual.scalar_type()),
                       c10::toString(expected.scalar_type()));
  }
  return "";
}

// Integers compared as doubles would round above 2^53; exactness needs at::equal.
Comparison compare_exact(const at::Tensor& actual, const at::Tensor& expected) {
  Comparison result;
  result.matches = at::equal(actual, expected);
  auto diff = (actual.to(at::kDouble) - expected.to(at::kDouble)).abs();
  result.max_abs_diff = result.matches ? 0.0 : diff.max().item<double>();
  return result;
}

Comparison compare_close(const at::Tensor& actual, const at::Tensor& expected, const Tolerance& tolerance) {
  auto wide = c10::isComplexType(actual.scalar_type()) ? at::kComplexDouble : at::kDouble;
  auto a = actual.to(wide);
  auto e = expected.to(wide);
  auto diff = (a - e).abs();
  auto same = (a == e) | (at::isnan(a) & at::isnan(e));
  auto close = same | (diff <= tolerance.atol + tolerance.rtol * e.abs());
  Comparison result;
  result.matches = close.all().item<bool>();
  // NaN stays in the maximum where only one side has it, so a kernel that wrote nothing shows up.
  auto shown = diff.masked_fill(same, 0);
  result.max_abs_diff = shown.isnan().any().item<bool>() ? std::nan("") : shown.max().item<double>();
  return result;
}

}  // namespace

Tolerance tolerance_for(c10::ScalarType dtype) {
  if (dtype == at::kHalf || dtype == at::kBFloat16) return {1e-2, 1e-2};
  if (c10::isFloatingType(dtype) || c10::isComplexType(dtype)) return {1e-5, 1e-5};
  return {0, 0};
}

std::string describe(const Tolerance& tolerance) {
  if (tolerance.atol == 0 && tolerance.rtol == 0) return "exact";
  return fmt::format("atol {:g} + rtol {:g} * |ref|", tolerance.atol, tolerance.rtol);
}

Comparison compare_tensors(const at::Tensor& actual, const at::Tensor& expected, const Tolerance& tolerance) {
  if (auto problem = mismatch_of_metadata(actual, expected); !problem.empty()) return Comparison{false, 0, problem};
  if (actual.numel() == 0) return Comparison{true, 0, ""};
  auto a = actual.cpu();
  auto e = expected.cpu();
  if (tolerance.atol == 0 && tolerance.rtol == 0) return compare_exact(a, e);
  return compare_close(a, e, tolerance);
}

}  // namespace zenith::tools
