// A full dependency on the work before, for a kernel launched by a library as a programmatic
// dependent (compute capability 9.0 on). cuDNN launches its runtime-fusion convolution kernels so
// (a captured graph's edges into them are programmatic): such a kernel may start as soon as the
// kernel before it on the stream lets its dependents start. Right after a generated kernel of the
// JIT CUDA plugin, which lets its dependents start as its first statement
// (backends/cuda/programmatic_launch.h), the fused kernel computed from data that kernel had not
// written yet (it must read some operands before its `griddepcontrol.wait`): ResNet-50 b1 in
// float16 gave results off by up to 2.3 in about half its runs with CUDA graphs (never launch by
// launch, where the host is slower than the device), and every run was right with a node between
// the two (docs/performance.md).
//
// A programmatic dependency exists only between two kernels adjacent on a stream, or two kernel
// nodes of a graph joined by a programmatic edge; anything else in between makes the dependency a
// full one.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

namespace zenith::torch_gpu {

/// Makes the next launch on `stream` start only after everything enqueued on it before has
/// finished and its writes are visible, whatever the launch's attributes. Under stream capture it
/// adds an empty node joining the capture's current dependencies (no work at a replay); outside,
/// it enqueues a 4-byte memset into memory of its own. Returns an empty string, or what failed.
std::string depend_fully_on_work_before(cudaStream_t stream);

}  // namespace zenith::torch_gpu
