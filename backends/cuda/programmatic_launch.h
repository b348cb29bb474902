// Programmatic dependent launch (compute capability 9.0 and up): a generated kernel is launched so
// that the device may start it while the kernel before it on the stream is still finishing. At
// batch 1 a decode step is hundreds of short kernels, each of which otherwise waits for the one
// before it to drain, and only then is dispatched, its blocks scheduled, its first loads issued.
//
// Correctness rests on the kernel side: every generated kernel first executes
// `zn_await_previous_kernel()` (device_prelude(), backends/cuda/expression_rules.h), which waits
// until every kernel it depends on has completed and its writes are visible, and only then lets
// the kernel after it start early in turn; nothing is read or written before it. Kernels that are
// not ours (cuBLASLt, PyTorch's) are launched as usual and wait for ours to complete. So at most
// two kernels overlap, the second waiting, and every kernel still sees its inputs complete.
// Launched without the attribute, or on an older device, the wait returns at once.
#pragma once

#include <cuda_runtime_api.h>

namespace zenith::cuda {

/// Whether a device of compute capability `major` takes programmatic dependent launches (9.0 on),
/// and the user has not turned them off with ZENITH_PROGRAMMATIC_LAUNCH=0.
bool programmatic_launch_enabled(int major);

/// Enqueues `function` (a kernel handle from cudaLibraryGetKernel, or a function pointer) on
/// `stream` with `params` as cudaLaunchKernel takes them; with `programmatic`, as a programmatic
/// dependent launch. The kernel must begin with zn_await_previous_kernel(). Returns CUDA's status.
cudaError_t launch_generated_kernel(const void* function, dim3 grid, dim3 block, void** params, cudaStream_t stream,
                                    bool programmatic);

}  // namespace zenith::cuda
