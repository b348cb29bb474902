#include "core/convolution_scale_relu.h"

#include <atomic>
#include <memory>
#include <mutex>

#include <ATen/ATen.h>
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
  const std::vector<std::int64_t> no_output_padding(call.stride.size(), 0);
  const auto convolved = at::_convolution(call.input, call.weight, std::nullopt, call.stride, call.padding,
                                          call.dilation, /*transposed=*/false, no_output_padding, call.groups,
                                          /*benchmark=*/false, /*deterministic=*/false, /*cudnn_enabled=*/true,
                                          call.allow_tf32);
  auto per_channel = [](const at::Tensor& v) { return v.to(at::kFloat).view({1, -1, 1, 1}); };
  // The convolution's layout carries through: TensorIterator follows its strides.
  auto out = at::addcmul(per_channel(call.shift), convolved.to(at::kFloat), per_channel(call.scale));
  if (call.residual && call.residual->defined()) out.add_(*call.residual);
  return out.relu_().to(call.input.scalar_type());
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
