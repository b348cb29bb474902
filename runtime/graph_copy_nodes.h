// A CUDA graph's copies of the call's inputs in and of its results out, recorded as memcpy nodes
// of the graph itself and pointed at each call's tensors before its replay. A cudaMemcpyAsync per
// input and output at every replay cost the host 3 to 4 us each on the H200 (2026-11-30: a
// sampling profile of bench_call_overhead's one-link synthetic module put its two copies at 35%
// of a graphed call's host time); with the nodes, BERT-base b1 float32's graphed call took 23.8 us
// of host time against 39. A node's parameters change only when the call's tensor lies elsewhere
// than the last one's: a caller that passes the same inputs, or lets each result go before the
// next call (the caching allocator then hands back the same block), pays nothing for them.
// A copy out is recorded after the plan's last launch and waits for that launch alone; that
// covers every launch before it because a kernel that may start before the one ahead of it
// finishes (a programmatic launch: only Zenith's generated kernels are launched so) waits for it
// before its first read, and so finishes after it.
// Built with LibTorch's CUDA part only, as runtime/plan_graph.cpp, its user.
#pragma once

#include <cstddef>
#include <vector>

#include <ATen/core/Tensor.h>
#include <cuda_runtime_api.h>

namespace zenith {

/// One memcpy node of a captured graph: what it copies, as the executable graph has it now.
struct CopyNode {
  cudaGraphNode_t node = nullptr;  // in the graph the executable was made from
  void* destination = nullptr;
  const void* source = nullptr;
  std::size_t bytes = 0;
};

/// Queues on `stream`, which is capturing, the copy of `source`'s bytes into `destination` (both
/// plain_dense with the same layout, device_copy.h), which the capture records as a memcpy node;
/// returns it, its `node` found later by find_copy_nodes.
CopyNode capture_copy(const at::Tensor& destination, const at::Tensor& source, cudaStream_t stream);

/// Sets each copy's `node`: the memcpy node of `graph` that copies its bytes from its source to
/// its destination. Throws std::runtime_error, naming the copy, where there is not exactly one
/// (the graph then runs launch by launch).
void find_copy_nodes(cudaGraph_t graph, const std::vector<CopyNode*>& copies);

/// Points `copy` at `destination` and `source` for the launches of `exec` from now on (launches
/// already queued keep what they had); nothing when it copies between them already. Throws
/// std::runtime_error with CUDA's error.
void repoint(cudaGraphExec_t exec, CopyNode& copy, void* destination, const void* source);

}  // namespace zenith
