// zenith::convolution_scale_relu (core/convolution_scale_relu.h) as one cuDNN graph: the
// convolution, then a multiply by the per-channel scale, an add of the per-channel shift, the
// residual's add and the ReLU in the convolution's epilogue, on cuDNN's runtime-fusion engine.
//
// What it takes: float16 or bfloat16 on CUDA, every tensor channels-last and densely packed, data
// 16-byte aligned, one group, cuDNN enabled and not asked to be deterministic; scale and shift
// float32 vectors of the output's channels. Anything else, and any graph no cuDNN engine builds,
// runs the written form (the runner declines). Plans are built on a call outside a CUDA graph's
// capture (building one compiles a kernel) and kept per shape for the process; a call under
// capture whose plan is not built yet declines. cuDNN's own measurements on an H200 (cuDNN 9.19)
// are in docs/performance.md: the fused graph built in 36 to 378 ms a shape.
#pragma once

namespace zenith::torch_gpu {

/// Installs the runner in libzenith (zenith::ir::set_scaled_convolution_runner) while the plugin is
/// loaded, and removes it when the plugin is unloaded.
void install_cudnn_scaled_convolution();
void remove_cudnn_scaled_convolution();

}  // namespace zenith::torch_gpu
