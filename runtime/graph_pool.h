// One CUDA memory pool for CUDA graphs, and the order of their replays. Built with LibTorch's CUDA
// part only (runtime/plan_graph.cpp is its one user).
//
// A graph replays into the addresses it was captured with, so a graph that owns a pool keeps all
// the memory of its capture between replays. The inference graphs of one compiled module copy the
// call's tensors in and every result out, so between two replays none of their memory holds
// anything a later call reads: they share one pool, and once a capture ends its tensors (the
// inputs' buffers, the intermediates, the outputs) go back to the pool for the next capture to
// reuse. A decoder whose cache grows a token per call captures a graph per length; with a pool
// each, its memory grew with every length (1,146 MB against eager's 42 on an H200).
//
// Sharing is correct only while no two replays of the pool overlap on the device: every capture
// and replay holds the pool's lock, and a replay queued on another stream than the last one waits
// for that stream's work first. Graphs of one module therefore replay one at a time.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGraphsC10Utils.h>
#include <c10/cuda/CUDAStream.h>

#include "runtime/graph_registration.h"

namespace zenith {

class GraphPool {
 public:
  GraphPool() = default;
  GraphPool(const GraphPool&) = delete;
  GraphPool& operator=(const GraphPool&) = delete;
  /// Lets each device's pool go once the graphs captured into it are gone too.
  ~GraphPool();

  /// Held by a graph of this pool while it captures or replays.
  std::unique_lock<std::mutex> lock() { return std::unique_lock<std::mutex>(mutex_); }

  /// The pool's id on `device`. The first call for a device captures a graph of one kernel into
  /// the pool, kept as long as this object: LibTorch shares a pool between live graphs, and a pool
  /// whose last graph is gone cannot take another capture (a module's graphs come and go: a plan
  /// evicted, a parameter replaced). Not during a capture; under lock().
  c10::MempoolId_t id(c10::DeviceIndex device);

  /// The stream every capture into this pool on `device` records on, a stream of the pool's own:
  /// the caching allocator hands a freed block only to allocations on the stream it was made on.
  /// Under lock().
  c10::cuda::CUDAStream capture_stream(c10::DeviceIndex device);

  /// Orders what is queued next on the current stream of `device` after the last replay of any
  /// graph of this pool there and after everything its stream queued since (the copies of its
  /// results out). Records the current stream as the last one. Under lock().
  void follow_last_replay(c10::DeviceIndex device);

 private:
  struct OnDevice {
    LockedGraph anchor;                              // keeps the pool shared (id())
    cudaStream_t own_stream = nullptr;               // capture_stream's, destroyed with this object
    std::optional<c10::cuda::CUDAStream> last;       // where the last replay ran
    at::cuda::CUDAEvent switch_event;                // orders a replay after another stream's work
  };

  std::mutex mutex_;
  c10::MempoolId_t id_ = {0, 0};  // made by the first id()
  std::map<c10::DeviceIndex, OnDevice> devices_;
};

}  // namespace zenith
