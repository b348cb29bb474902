#include "core/convolution_scale_relu.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/library.h>

#include "core/convolution_relu.h"

namespace zenith::ir {
namespace {

std::mutex& runner_mutex() {
  static std::mutex mutex;
  return mutex;
}

// Shared, so that a call in flight keeps the runner it started with while a plugin swaps it.
std::shared_ptr<const ScaledConvolutionRunner>& installed_runner() {
  static std::shared_ptr<const ScaledConvolutionRunner> runner;
  return runner;
}

std::atomic<std::int64_t> runner_calls{0};

std::shared_ptr<const ScaledConvolutionRunner> current_runner() {
  const std::lock_guard<std::mutex> lock(runner_mutex());
  return installed_runner();
}

const at::Tensor* residual_of(const ScaledConvolution& call) {
  return call.residual && call.residual->defined() ? &*call.residual : nullptr;
}

// The written form's first part: the convolution alone, in the input's dtype.
at::Tensor convolved_alone(const ScaledConvolution& call) {
  const std::vector<std::int64_t> no_output_padding(call.stride.size(), 0);
  return at::_convolution(call.input, call.weight, std::nullopt, call.stride, call.padding, call.dilation,
                          /*transposed=*/false, no_output_padding, call.groups, /*benchmark=*/false,
                          /*deterministic=*/false, /*cudnn_enabled=*/true, call.allow_tf32);
}

// The written form's second part, on all of `convolved` or on a block of it: `scale` and `shift`
// shaped to broadcast over its channels, `residual` (null for none) of its shape; in float32,
// rounded once to `convolved`'s dtype. The convolution's layout carries through: TensorIterator
// follows its strides.
at::Tensor scaled_epilogue(const at::Tensor& convolved, const at::Tensor& scale, const at::Tensor& shift,
                           const at::Tensor* residual) {
  auto out = at::addcmul(shift.to(at::kFloat), convolved.to(at::kFloat), scale.to(at::kFloat));
  if (residual != nullptr) out.add_(*residual);
  return out.relu_().to(convolved.scalar_type());
}

// Elements the disagreement check computes at a time: 256 KB per float32 intermediate. Over a
// whole output, the written epilogue's intermediates and the comparison's took about twenty bytes
// an element at a plan's first call, which raised ResNet-50 b1 float16's peak from eager's 6.5 MB
// to 10.5 (the whole suite, 2026-11-29).
constexpr std::int64_t kCheckedElements = std::int64_t{1} << 16;

// [pixels, channels] over a 4-D tensor's channels-last memory order (a view of a channels-last
// tensor, a copy of another).
at::Tensor pixel_rows(const at::Tensor& t) { return t.permute({0, 2, 3, 1}).reshape({-1, t.size(1)}); }

at::Tensor convolution_scale_relu(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& scale,
                                  const at::Tensor& shift, const std::optional<at::Tensor>& residual,
                                  at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation,
                                  int64_t groups, bool allow_tf32) {
  const ScaledConvolution call{input, weight, scale, shift, residual, stride, padding, dilation, groups, allow_tf32};
  if (input.is_cuda()) {
    if (auto runner = current_runner()) {
      if (auto out = (*runner)(call)) {
        runner_calls.fetch_add(1, std::memory_order_relaxed);
        return *out;
      }
    }
  }
  return convolution_scale_relu_written(call);
}

at::Tensor convolution_scale_relu_meta(const at::Tensor& input, const at::Tensor& weight, const at::Tensor&,
                                       const at::Tensor&, const std::optional<at::Tensor>&, at::IntArrayRef stride,
                                       at::IntArrayRef padding, at::IntArrayRef dilation, int64_t, bool) {
  return convolution_result_like(input, weight, stride, padding, dilation);
}

}  // namespace

at::Tensor convolution_scale_relu_written(const ScaledConvolution& call) {
  const auto convolved = convolved_alone(call);
  auto per_channel = [](const at::Tensor& v) { return v.view({1, -1, 1, 1}); };
  return scaled_epilogue(convolved, per_channel(call.scale), per_channel(call.shift), residual_of(call));
}

std::string convolution_scale_relu_disagreement(const ScaledConvolution& call, const at::Tensor& result) {
  // The written form's sizes are the convolution's, which the check computes anyway.
  const auto convolution = convolved_alone(call);
  if (result.sizes() != convolution.sizes()) {
    return fmt::format("its sizes [{}] are not the written form's [{}]", fmt::join(result.sizes(), ", "),
                       fmt::join(convolution.sizes(), ", "));
  }
  if (result.numel() == 0) return "";
  const auto got = pixel_rows(result);
  const auto convolved = pixel_rows(convolution);
  const at::Tensor* residual = residual_of(call);
  const auto residual_rows = residual != nullptr ? pixel_rows(*residual) : at::Tensor();
  const auto scale = call.scale.view({1, -1});
  const auto shift = call.shift.view({1, -1});
  const auto pixels = got.size(0);
  const auto block = std::max<std::int64_t>(1, kCheckedElements / got.size(1));
  // On the device until the end, so that the blocks queue without waiting for each other.
  auto unwritten = at::zeros({}, result.options().dtype(at::kBool));
  auto difference = at::zeros({}, result.options().dtype(at::kFloat));
  auto magnitude = at::zeros({}, result.options().dtype(at::kFloat));
  for (std::int64_t first = 0; first < pixels; first += block) {
    const auto count = std::min(block, pixels - first);
    const auto residual_block = residual != nullptr ? residual_rows.narrow(0, first, count) : at::Tensor();
    const auto want = scaled_epilogue(convolved.narrow(0, first, count), scale, shift,
                                      residual != nullptr ? &residual_block : nullptr)
                          .to(at::kFloat);
    const auto mine = got.narrow(0, first, count).to(at::kFloat);
    const auto infinite = want.isfinite().logical_not_();
    unwritten.logical_or_((mine.isnan() & infinite.logical_not()).any());
    difference = at::maximum(difference, (mine - want).abs().masked_fill_(infinite, 0).max());
    magnitude = at::maximum(magnitude, want.abs().masked_fill_(infinite, 0).max());
  }
  if (unwritten.item<bool>()) return "it left outputs unwritten";
  const double largest_difference = difference.item<double>();
  const double largest_magnitude = magnitude.item<double>();
  const double tolerance = result.scalar_type() == at::kHalf ? 1e-2 : 4e-2;
  if (largest_difference > tolerance * largest_magnitude) {
    return fmt::format("its largest difference {:.3g} exceeds {} of the largest magnitude {:.3g}", largest_difference,
                       tolerance, largest_magnitude);
  }
  return "";
}

void set_scaled_convolution_runner(ScaledConvolutionRunner runner) {
  auto made = runner ? std::make_shared<const ScaledConvolutionRunner>(std::move(runner)) : nullptr;
  const std::lock_guard<std::mutex> lock(runner_mutex());
  installed_runner() = std::move(made);
}

std::int64_t scaled_convolution_runner_calls() { return runner_calls.load(std::memory_order_relaxed); }

TORCH_LIBRARY_FRAGMENT(zenith, m) {
  m.def("convolution_scale_relu(Tensor input, Tensor weight, Tensor scale, Tensor shift, Tensor? residual, "
        "int[] stride, int[] padding, int[] dilation, int groups, bool allow_tf32) -> Tensor");
}

TORCH_LIBRARY_IMPL(zenith, CompositeExplicitAutograd, m) { m.impl("convolution_scale_relu", &convolution_scale_relu); }

TORCH_LIBRARY_IMPL(zenith, Meta, m) { m.impl("convolution_scale_relu", &convolution_scale_relu_meta); }

}  // namespace zenith::ir
