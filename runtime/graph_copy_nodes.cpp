#include "runtime/graph_copy_nodes.h"

#include <stdexcept>

#include <c10/cuda/CUDAException.h>
#include <fmt/format.h>

#include "runtime/device_copy.h"

namespace zenith {

CopyNode capture_copy(const at::Tensor& destination, const at::Tensor& source, cudaStream_t stream) {
  CopyNode copy;
  copy.destination = destination.data_ptr();
  copy.source = source.const_data_ptr();
  copy.bytes = static_cast<std::size_t>(byte_count(source));
  C10_CUDA_CHECK(cudaMemcpyAsync(copy.destination, copy.source, copy.bytes, cudaMemcpyDeviceToDevice, stream));
  return copy;
}

void find_copy_nodes(cudaGraph_t graph, const std::vector<CopyNode*>& copies) {
  std::size_t count = 0;
  C10_CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &count));
  std::vector<cudaGraphNode_t> nodes(count);
  C10_CUDA_CHECK(cudaGraphGetNodes(graph, nodes.data(), &count));
  for (auto* copy : copies) copy->node = nullptr;
  for (auto node : nodes) {
    cudaGraphNodeType type{};
    C10_CUDA_CHECK(cudaGraphNodeGetType(node, &type));
    if (type != cudaGraphNodeTypeMemcpy) continue;
    cudaMemcpy3DParms parameters{};
    C10_CUDA_CHECK(cudaGraphMemcpyNodeGetParams(node, &parameters));
    for (auto* copy : copies) {
      // By addresses alone, as run on the H200; the extent's fields for a captured 1D copy are
      // not relied on (distinct destinations make the pair unique: record_output_copies).
      if (parameters.dstPtr.ptr != copy->destination || parameters.srcPtr.ptr != copy->source) continue;
      if (copy->node != nullptr) {
        throw std::runtime_error(fmt::format("two memcpy nodes of the graph copy {} bytes from {} to {}", copy->bytes,
                                             copy->source, copy->destination));
      }
      copy->node = node;
    }
  }
  for (const auto* copy : copies) {
    if (copy->node == nullptr) {
      throw std::runtime_error(fmt::format("no memcpy node of the graph copies {} bytes from {} to {}", copy->bytes,
                                           copy->source, copy->destination));
    }
  }
}

void repoint(cudaGraphExec_t exec, CopyNode& copy, void* destination, const void* source) {
  if (destination == copy.destination && source == copy.source) return;
  const auto status =
      cudaGraphExecMemcpyNodeSetParams1D(exec, copy.node, destination, source, copy.bytes, cudaMemcpyDeviceToDevice);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();  // not the next launch's error
    throw std::runtime_error(fmt::format("the graph's copy of {} bytes could not be pointed from {} to {}: {}", copy.bytes,
                                         source, destination, cudaGetErrorString(status)));
  }
  copy.destination = destination;
  copy.source = source;
}

}  // namespace zenith
