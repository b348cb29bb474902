// zenith::convolution_scale_relu (core/convolution_scale_relu.h) as one cuDNN graph: the
// convolution, then a multiply by the per-channel scale, an add of the per-channel shift, the
// residual's add and the ReLU in the convolution's epilogue, on cuDNN's runtime-fusion engine.
//
// What it takes: float16 or bfloat16 on CUDA, every tensor channels-last and densely packed, data
// 16-byte aligned, one group, cuDNN enabled and not asked to be deterministic; scale and shift
// float32 vectors of the output's channels. Anything else, and any graph no cuDNN engine builds,
// runs the written form (the runner declines). Plans are built on a call outside a CUDA graph's
// capture (building one compiles a kernel) and kept per shape and pointer alignment for the
// process; a call under capture whose plan is not built yet declines. A new plan runs once on its
// first call's tensors into an output filled with NaN and serves only if it agrees with the
// written ops there (every output written, within 1% of the largest magnitude in float16, 4% in
// bfloat16). Every execution starts only after the work before it on the stream has finished
// (full_dependency.h): cuDNN launches the fused kernel as a programmatic dependent, and it read
// operands the kernel before it had not written yet. On an H200 (cuDNN 9.19) the fused graph
// built in 36 to 378 ms a shape.
#pragma once

namespace zenith::torch_gpu {

/// Installs the runner in libzenith (zenith::ir::set_scaled_convolution_runner) while the plugin is
/// loaded, and removes it when the plugin is unloaded.
void install_cudnn_scaled_convolution();
void remove_cudnn_scaled_convolution();

}  // namespace zenith::torch_gpu
