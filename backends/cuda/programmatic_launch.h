// Programmatic dependent launch (compute capability 9.0 and up) of the matrix-vector kernel: the
// device may start it while the kernel before it on the stream is still running, so that its
// first weight loads are in flight when that kernel finishes. At batch 1 a decode step is a chain
// of short kernels, each of which otherwise waits for the one before it to drain, and only then
// is dispatched and issues its first loads: about a microsecond of memory latency per product.
//
// Correctness rests on three things. The matrix-vector kernel reads only its weight before
// `griddepcontrol.wait` (which returns once every kernel it depends on has completed and its
// writes are visible), and it is launched so only when the weight is read-only for the whole plan
// (core/read_only_values.h: a parameter or constant no node writes; the group input's role says
// so) and the stream is being captured into the plan's CUDA graph, where every kernel before it is
// the plan's own; outside a graph the kernel before it may be the application's, writing the
// weight (ZENITH_PROGRAMMATIC_LAUNCH=1 turns it on; see programmatic_launch_enabled for why it is
// off by default). The generated elementwise, row and blind-rows kernels let the kernel after them start
// as soon as they begin (`griddepcontrol.launch_dependents`); a kernel launched as usual after
// them still starts only when they have finished, so for every other kernel nothing changes.
#pragma once

#include <cuda_runtime_api.h>

namespace zenith::cuda {

/// Whether a device of compute capability `major` takes programmatic dependent launches (9.0 on),
/// and the user asked for them with ZENITH_PROGRAMMATIC_LAUNCH=1. Off by default: the plugin cannot
/// yet tell the host's capture of a plan's graph from an application's own capture around a call,
/// where the kernel before the matrix-vector kernel may be the application's, writing the weight.
bool programmatic_launch_enabled(int major);

/// Enqueues `function` (a kernel handle from cudaLibraryGetKernel, or a function pointer) on
/// `stream` with `params` as cudaLaunchKernel takes them; with `programmatic`, as a programmatic
/// dependent launch, which only a kernel that reads nothing another kernel may be writing before
/// its `griddepcontrol.wait` can take. Returns CUDA's status.
cudaError_t launch_generated_kernel(const void* function, dim3 grid, dim3 block, void** params, cudaStream_t stream,
                                    bool programmatic);

/// Whether `stream` is being captured into a CUDA graph (false when CUDA cannot tell).
bool stream_is_capturing(cudaStream_t stream);

}  // namespace zenith::cuda
