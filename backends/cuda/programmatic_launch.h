// Programmatic dependent launches (compute capability 9.0 and up) in a plan's CUDA graph: the
// device may dispatch a kernel while the kernel before it on the stream is still running. At batch
// 1 a decode step is a chain of short kernels, each of which otherwise waits for the one before it
// to drain, and only then is dispatched and issues its first loads: about a microsecond a kernel.
//
// Every generated kernel but the max pool starts with zn_follow_kernel_before (the device prelude,
// expression_rules.cpp): it waits (`griddepcontrol.wait`) until the kernel before it has finished
// and its writes are visible, then lets the kernel after it be dispatched
// (`griddepcontrol.launch_dependents`). Such a kernel reads nothing before the wait, so it is
// launched so whenever the host records its plan's graph; it gains its dispatch. The
// matrix-vector kernel also loads the first batch of its weight before its wait, so it is launched
// so only where the host says nothing recorded in the graph writes the weight
// (zn_launch_args.inputs_unwritten, ABI 1.6, runtime/unwritten_inputs.h: a parameter, buffer or
// constant no step writes, or a value the host derived from them before the graph runs). The host
// passes that only while it records a CUDA graph of its own plan, where every kernel before this
// one is the plan's; outside such a graph (launch by launch, or inside an application's own
// capture around a call) the kernel before it may be the application's, writing the weight, and
// every launch is as usual. A kernel launched as usual after one of these still starts only when
// it has finished. A library's kernel that the library launches as a programmatic dependent does
// not: it may start while one of these runs, since these let their dependents start at once.
// cuDNN launches its runtime-fusion convolutions so, and one computed from data not yet written
// (plugins/torch_gpu/full_dependency.h puts a full dependency before each). Which other library
// kernels are launched so (cuBLASLt's, ATen's) has not been measured. ZENITH_PROGRAMMATIC_LAUNCH=0
// turns these launches off, not the early start they allow such a kernel.
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
