#include "runtime/graph_memset_nodes.h"

#include <map>
#include <mutex>
#include <stdexcept>
#include <tuple>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <fmt/format.h>

namespace zenith {
namespace {

// Distinct patterns (device, value, element size) given a buffer. Memsets of a graph almost always
// write zeros; a bound keeps a process that meets many values from growing without limit.
constexpr std::size_t kMaxPatterns = 16;

void check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  (void)cudaGetLastError();  // not the next launch's error
  throw std::runtime_error(fmt::format("{}: {}", what, cudaGetErrorString(status)));
}

// kMaxRewrittenMemsetBytes of `value` in elements of `element_size` bytes on `device`, or null
// when kMaxPatterns buffers exist already. The tensors are never freed: a graph made from a
// rewritten graph reads its buffer at every launch, for as long as it lives, and the process's
// exit would destroy static tensors after CUDA has gone.
const void* pattern_buffer(c10::DeviceIndex device, unsigned value, unsigned element_size) {
  static std::mutex mutex;
  static auto* buffers = new std::map<std::tuple<c10::DeviceIndex, unsigned, unsigned>, at::Tensor>();
  std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_tuple(device, value, element_size);
  if (auto found = buffers->find(key); found != buffers->end()) return found->second.const_data_ptr();
  if (buffers->size() >= kMaxPatterns) return nullptr;
  c10::cuda::CUDAGuard guard(device);
  const auto options = at::TensorOptions().device(at::kCUDA, device);
  const auto elements = static_cast<std::int64_t>(kMaxRewrittenMemsetBytes / element_size);
  at::Tensor buffer;
  // cudaMemset's element of 1, 2 or 4 bytes takes the value's low bits.
  switch (element_size) {
    case 1: buffer = at::full({elements}, static_cast<std::uint8_t>(value), options.dtype(at::kByte)); break;
    case 2: buffer = at::full({elements}, static_cast<std::int16_t>(value), options.dtype(at::kShort)); break;
    case 4: buffer = at::full({elements}, static_cast<std::int32_t>(value), options.dtype(at::kInt)); break;
    default: throw std::runtime_error(fmt::format("a memset node of {}-byte elements (CUDA has 1, 2 and 4)", element_size));
  }
  // Graphs may replay on any stream: the pattern is in place before any of them.
  at::cuda::getCurrentCUDAStream(device).synchronize();
  return buffers->emplace(key, std::move(buffer)).first->second.const_data_ptr();
}

// A node's edges on one side, with their data (a kernel's programmatic ports, for instance).
struct Edges {
  std::vector<cudaGraphNode_t> nodes;
  std::vector<cudaGraphEdgeData> data;
};

// cudaGraphNodeGetDependencies or cudaGraphNodeGetDependentNodes.
using EdgeQuery = cudaError_t (*)(cudaGraphNode_t, cudaGraphNode_t*, cudaGraphEdgeData*, std::size_t*);

Edges edges(cudaGraphNode_t node, EdgeQuery query, const char* what) {
  Edges found;
  std::size_t count = 0;
  check(query(node, nullptr, nullptr, &count), what);
  found.nodes.resize(count);
  found.data.resize(count);
  if (count > 0) check(query(node, found.nodes.data(), found.data.data(), &count), what);
  return found;
}

// `memset`, which sets `p`, replaced by a copy of `p`'s bytes from `pattern`.
void replace(cudaGraph_t graph, cudaGraphNode_t memset, const cudaMemsetParams& p, const void* pattern) {
  const auto before = edges(memset, cudaGraphNodeGetDependencies, "reading a memset node's dependencies");
  const auto after = edges(memset, cudaGraphNodeGetDependentNodes, "reading a memset node's dependents");
  const std::size_t row = p.width * p.elementSize;
  cudaGraphNodeParams params{};
  params.type = cudaGraphNodeTypeMemcpy;
  auto& copy = params.memcpy.copyParams;
  // The pattern's rows lie back to back; the memset's, `pitch` apart (unused for one row).
  copy.srcPtr = make_cudaPitchedPtr(const_cast<void*>(pattern), row, row, p.height);
  copy.dstPtr = make_cudaPitchedPtr(p.dst, p.height > 1 ? p.pitch : row, row, p.height);
  copy.extent = make_cudaExtent(row, p.height, 1);
  copy.kind = cudaMemcpyDeviceToDevice;  // memsets_as_copies rewrites memsets of device memory only
  cudaGraphNode_t node = nullptr;
  check(cudaGraphAddNode(&node, graph, before.nodes.data(), before.data.data(), before.nodes.size(), &params),
        "adding a memcpy node in a memset node's place");
  if (!after.nodes.empty()) {
    const std::vector<cudaGraphNode_t> from(after.nodes.size(), node);
    const auto status =
        cudaGraphAddDependencies(graph, from.data(), after.nodes.data(), after.data.data(), after.nodes.size());
    // A copy nothing waits for could land after the memset's dependents wrote those bytes (cuDNN's
    // kernel updates the word its memset zeroed): it goes before the error is reported.
    if (status != cudaSuccess) (void)cudaGraphDestroyNode(node);
    check(status, "making a memset node's dependents wait for its memcpy node");
  }
  // Should this fail, the memset and its copy both stand, each with every edge: the same bytes.
  check(cudaGraphDestroyNode(memset), "removing a memset node");
}

}  // namespace

MemsetRewrite memsets_as_copies(cudaGraph_t graph, c10::DeviceIndex device) {
  c10::cuda::CUDAGuard guard(device);  // the memcpy nodes are made in the current context
  std::size_t count = 0;
  check(cudaGraphGetNodes(graph, nullptr, &count), "listing a captured graph's nodes");
  std::vector<cudaGraphNode_t> nodes(count);
  check(cudaGraphGetNodes(graph, nodes.data(), &count), "listing a captured graph's nodes");
  MemsetRewrite result;
  for (auto node : nodes) {
    cudaGraphNodeType type{};
    check(cudaGraphNodeGetType(node, &type), "reading a graph node's type");
    if (type != cudaGraphNodeTypeMemset) continue;
    cudaMemsetParams p{};
    check(cudaGraphMemsetNodeGetParams(node, &p), "reading a memset node");
    const std::size_t row = p.width * p.elementSize;
    const bool small = row > 0 && p.height > 0 && p.height <= kMaxRewrittenMemsetBytes / row;
    // The measured copies were within one device (graph_memset_nodes.h); a memset of host memory
    // mapped for the device, managed memory or another device's stays as it is.
    cudaPointerAttributes where{};
    check(cudaPointerGetAttributes(&where, p.dst), "reading where a memset node writes");
    // cudaMemset keeps the value's low bits: one pattern per value the element can hold.
    const unsigned value = p.elementSize == 1 ? p.value & 0xffu : p.elementSize == 2 ? p.value & 0xffffu : p.value;
    const void* pattern =
        small && where.type == cudaMemoryTypeDevice && where.device == device ? pattern_buffer(device, value, p.elementSize)
                                                                                : nullptr;
    if (pattern == nullptr) {
      ++result.kept;
      continue;
    }
    replace(graph, node, p, pattern);
    ++result.rewritten;
  }
  return result;
}

}  // namespace zenith
