// Programmatic dependent launch (compute capability 9.0 and up) of the matrix-vector kernel: the
// device may start it while the kernel before it on the stream is still running, so that its
// first weight loads are in flight when that kernel finishes. At batch 1 a decode step is a chain
// of short kernels, each of which otherwise waits for the one before it to drain, and only then
// is dispatched and issues its first loads: about a microsecond of memory latency per product.
//
// Correctness rests on three things. The matrix-vector kernel reads only its weight before
// `griddepcontrol.wait` (which returns once every kernel it depends on has completed and its
// writes are visible). It is launched so only where the host says the weight is unwritten
// (zn_launch_args.inputs_unwritten, ABI 1.6): the host is recording a CUDA graph of its own plan,
// so every kernel before it is the plan's, and none of them writes the weight (a parameter,
// buffer or constant no step writes, or a value the host derived from them before the graph;
// runtime/unwritten_inputs.h). Outside such a graph (launch by launch, or inside an application's
// own capture around a call) the kernel before it may be the application's, writing the weight,
// and the host passes nothing. The generated elementwise, row and blind-rows kernels let the kernel
// after them start as soon as they begin (`griddepcontrol.launch_dependents`); a kernel launched
// as usual after them still starts only when they have finished, so for every other kernel
// nothing changes. ZENITH_PROGRAMMATIC_LAUNCH=0 turns the early launches off.
#pragma once

#include <cuda_runtime_api.h>

namespace zenith::cuda {

/// Whether a device of compute capability `major` takes programmatic dependent launches (9.0 on),
/// and ZENITH_PROGRAMMATIC_LAUNCH is not 0.
bool programmatic_launch_enabled(int major);

/// Enqueues `function` (a kernel handle from cudaLibraryGetKernel, or a function pointer) on
/// `stream` with `params` as cudaLaunchKernel takes them; with `programmatic`, as a programmatic
/// dependent launch, which only a kernel that reads nothing another kernel may be writing before
/// its `griddepcontrol.wait` can take. Returns CUDA's status.
cudaError_t launch_generated_kernel(const void* function, dim3 grid, dim3 block, void** params, cudaStream_t stream,
                                    bool programmatic);

}  // namespace zenith::cuda
