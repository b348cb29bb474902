#include "plugins/torch_gpu/full_dependency.h"

#include <array>
#include <exception>
#include <mutex>

#include <c10/cuda/CUDACachingAllocator.h>
#include <fmt/format.h>

namespace zenith::torch_gpu {
namespace {

std::string failed(const char* what, cudaError_t status) {
  (void)cudaGetLastError();  // not the next launch's error
  return fmt::format("{}: {}", what, cudaGetErrorString(status));
}

// Under capture: an empty node after the capture's current dependencies becomes the only one.
std::string join_capture(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  cudaGraph_t graph = nullptr;
  const cudaGraphNode_t* dependencies = nullptr;
  std::size_t count = 0;
  const auto info = cudaStreamGetCaptureInfo(stream, &status, nullptr, &graph, &dependencies, nullptr, &count);
  if (info != cudaSuccess) return failed("cudaStreamGetCaptureInfo", info);
  cudaGraphNode_t junction = nullptr;
  if (auto s = cudaGraphAddEmptyNode(&junction, graph, dependencies, count); s != cudaSuccess) {
    return failed("cudaGraphAddEmptyNode", s);
  }
  if (auto s = cudaStreamUpdateCaptureDependencies(stream, &junction, nullptr, 1, cudaStreamSetCaptureDependencies);
      s != cudaSuccess) {
    return failed("cudaStreamUpdateCaptureDependencies", s);
  }
  return "";
}

// Outside capture: a memset is no kernel, so the launch after it depends on it fully, and it
// starts only when the work before it has finished. Its target: 4 bytes per device from PyTorch's
// allocator, taken once (never under capture, where this path is not taken) and kept for the
// process.
std::string memset_between(cudaStream_t stream) {
  int device = 0;
  if (auto s = cudaGetDevice(&device); s != cudaSuccess) return failed("cudaGetDevice", s);
  static std::mutex mutex;
  static std::array<void*, 64> scratch{};
  if (device < 0 || device >= static_cast<int>(scratch.size())) return fmt::format("device {} out of range", device);
  void* target = nullptr;
  {
    const std::lock_guard<std::mutex> lock(mutex);
    if (scratch[device] == nullptr) {
      try {
        scratch[device] = c10::cuda::CUDACachingAllocator::raw_alloc(4);
      } catch (const std::exception& error) {
        return fmt::format("4 bytes for a memset could not be allocated: {}", error.what());
      }
    }
    target = scratch[device];
  }
  if (auto s = cudaMemsetAsync(target, 0, 4, stream); s != cudaSuccess) return failed("cudaMemsetAsync", s);
  return "";
}

}  // namespace

std::string depend_fully_on_work_before(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (auto s = cudaStreamIsCapturing(stream, &status); s != cudaSuccess) return failed("cudaStreamIsCapturing", s);
  if (status == cudaStreamCaptureStatusInvalidated) return "the stream's capture was invalidated";
  return status == cudaStreamCaptureStatusActive ? join_capture(stream) : memset_between(stream);
}

}  // namespace zenith::torch_gpu
