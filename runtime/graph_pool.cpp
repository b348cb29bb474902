// Built when LibTorch has CUDA, with runtime/plan_graph.cpp.
#include "runtime/graph_pool.h"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

namespace zenith {

GraphPool::~GraphPool() {
  for (auto& [device, on] : devices_) {
    on.anchor.reset();  // its reference on the pool goes with it
    // A stream with queued work is destroyed once the work is done (cudaStreamDestroy's contract).
    if (on.own_stream != nullptr) (void)cudaStreamDestroy(on.own_stream);
    (void)cudaGetLastError();  // at exit the driver may be gone first: nothing is left to free then
  }
}

c10::MempoolId_t GraphPool::id(c10::DeviceIndex device) {
  if (id_ == c10::MempoolId_t{0, 0}) id_ = at::cuda::graph_pool_handle();
  auto& on = devices_[device];
  if (!on.anchor) {
    c10::cuda::CUDAGuard guard(device);
    auto marker = at::empty({1}, at::TensorOptions().device(at::kCUDA, device));  // outside the pool
    const auto registration = lock_graph_registration();
    auto anchor = make_locked_graph();
    c10::cuda::CUDAStreamGuard on_stream(capture_stream(device));
    anchor->capture_begin(id_, cudaStreamCaptureModeThreadLocal);
    marker.zero_();  // one node: an empty graph draws a warning
    anchor->capture_end();
    on.anchor = std::move(anchor);
  }
  return id_;
}

c10::cuda::CUDAStream GraphPool::capture_stream(c10::DeviceIndex device) {
  auto& on = devices_[device];
  if (on.own_stream == nullptr) {
    // Not one of LibTorch's pooled streams: those are handed out round robin, and two pools
    // capturing at once on one stream would corrupt each other's capture.
    c10::cuda::CUDAGuard guard(device);
    C10_CUDA_CHECK(cudaStreamCreateWithFlags(&on.own_stream, cudaStreamNonBlocking));
  }
  return c10::cuda::getStreamFromExternal(on.own_stream, device);
}

void GraphPool::follow_last_replay(c10::DeviceIndex device) {
  auto& on = devices_[device];
  const auto current = c10::cuda::getCurrentCUDAStream(device);
  if (on.last && *on.last != current) {
    on.switch_event.record(*on.last);
    on.switch_event.block(current);
  }
  on.last = current;
}

}  // namespace zenith
