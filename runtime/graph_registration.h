// One process-wide lock over what LibTorch's CUDA graphs do to the device's default random
// generator. A graph registers with the generator when it begins capturing and unregisters when
// it is destroyed, and the generator keeps its graphs in a set with no lock of its own (PyTorch
// 2.11): two threads capturing or dropping graphs at once (two compiled modules called from two
// threads) could corrupt that set, and a later destruction aborted the process with "The graph
// should be registered to the state" (ConcurrentCallsCuda.TwoModulesSharingTheKernelCacheMatchEager
// on an H200, 2026-11-28). A capture also moves the generator's offsets, which a second capture at
// the same time would move too. So every graph Zenith makes is captured, and destroyed, under this
// lock; captures are a few per plan, off the replay path, and a replay takes no lock of it.
// Built with LibTorch's CUDA part only, as runtime/plan_graph.cpp, its user.
#pragma once

#include <memory>

#include <ATen/cuda/CUDAGraph.h>

#include "runtime/graph_registration_lock.h"

namespace zenith {

/// Destroys a graph under lock_graph_registration.
struct GraphUnderLockDeleter {
  void operator()(at::cuda::CUDAGraph* graph) const;
};

/// A CUDA graph whose destruction takes the lock.
using LockedGraph = std::unique_ptr<at::cuda::CUDAGraph, GraphUnderLockDeleter>;

/// A new, empty graph. With `keep_graph`, capture_end leaves it uninstantiated and keeps the
/// captured cudaGraph_t (raw_cuda_graph) for its nodes to be read; instantiate() makes it launchable.
LockedGraph make_locked_graph(bool keep_graph = false);

}  // namespace zenith
