// Built when LibTorch has CUDA; plan_graph_unavailable.cpp stands in otherwise.
#include "runtime/plan_graph.h"

#include <mutex>
#include <optional>
#include <set>

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <fmt/format.h>

#include "runtime/derived_values.h"
#include "runtime/executor.h"
#include "core/log.h"

namespace zenith {
namespace {

// Calls in a row whose inputs read by address moved before the graph is captured again: a
// parameter replaced for good should not cost every later call its replay.
constexpr int kMovedCallsBeforeRecapture = 2;
// Captures of one plan before graphs stay off for it: addresses that keep moving defeat them.
constexpr int kMaxCaptures = 4;

std::optional<c10::Device> graph_device(const Plan& plan, std::string& why) {
  std::optional<c10::Device> device;
  for (const auto& step : plan.steps) {
    if (step.kind != Step::Kind::Kernel) continue;
    if (!step.device.is_cuda()) {
      why = fmt::format("step {} runs on {} (backend {}), which a CUDA graph cannot replay", step.nodes.empty() ? -1 : step.nodes.front(),
                        step.device.str(), step.backend);
      return std::nullopt;
    }
    if (!step.kernel->graph_safe()) {
      why = fmt::format("backend {} does not declare its kernels safe to capture in a CUDA graph "
                        "(zn_compile_args.graph_safe)", step.backend);
      return std::nullopt;
    }
    if (device && *device != step.device) {
      why = fmt::format("its kernels run on {} and {}; a CUDA graph replays on one device", device->str(), step.device.str());
      return std::nullopt;
    }
    device = step.device;
  }
  if (!device) why = "it launches no kernel";
  return device;
}

// A tensor over `source`'s memory with an identity of its own: the graph keeps `source`, the
// caller gets this one, and the storage's reference count tells whether the caller still holds it.
at::Tensor share_memory(const at::Tensor& source) {
  if (!source.defined()) return source;
  auto tensor = at::empty({0}, source.options());
  tensor.set_(source.storage(), source.storage_offset(), source.sizes(), source.strides());
  return tensor;
}

class CudaPlanGraph final : public PlanGraph {
 public:
  CudaPlanGraph(std::shared_ptr<const Plan> plan, std::vector<bool> by_address, std::size_t copied_outputs,
                std::string what, c10::Device device, std::shared_ptr<PlanGraphCounters> counters,
                std::shared_ptr<const DerivedValues> derived)
      : plan_(std::move(plan)),
        derived_(std::move(derived)),
        by_address_(std::move(by_address)),
        copied_outputs_(copied_outputs),
        what_(std::move(what)),
        device_(device),
        counters_(counters ? std::move(counters) : std::make_shared<PlanGraphCounters>()) {}

  ~CudaPlanGraph() override {
    // Tensors in the graph's pool go before the pool does.
    drop_graph();
  }

  std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs) override {
    std::lock_guard<std::mutex> lock(mutex_);
    // Before any capture or replay: computing them waits for the device, which a capture cannot.
    if (derived_) derived_->update(inputs);
    if (disabled_) return execute_plan(inputs);
    if (graph_) {
      if (auto why = replay_blocker(inputs); !why.empty()) return run_plain(inputs, why);
      moved_calls_ = 0;
      return replay(inputs);
    }
    if (calls_++ == 0) return execute_plan(inputs);
    return capture_and_replay(inputs);
  }

  bool disabled() const override { return disabled_; }

 private:
  std::vector<at::Tensor> execute_plan(const std::vector<at::Tensor>& inputs) {
    return execute_flat(*plan_, inputs, nullptr, derived_.get());
  }

  // Why the held graph cannot serve `inputs`, or empty.
  std::string replay_blocker(const std::vector<at::Tensor>& inputs) {
    if (derived_ && derived_->moves() != derived_moves_) {
      if (++moved_calls_ >= kMovedCallsBeforeRecapture) drop_graph();
      return "a value derived from parameters moved since the graph was captured (a parameter was replaced)";
    }
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      if (!by_address_[i] || !inputs[i].defined()) continue;
      if (inputs[i].data_ptr() != addresses_[i]) {
        if (++moved_calls_ >= kMovedCallsBeforeRecapture) drop_graph();
        return fmt::format("input {} moved since the graph was captured", i);
      }
    }
    for (std::size_t k = 0; k < outputs_.size(); ++k) {
      if (!checked_[k]) continue;
      if (outputs_[k].storage().use_count() > baseline_[k]) {
        return fmt::format("output {} of the previous call is still held (its backward has not run, or a gradient is "
                           "kept), and a replay would overwrite it",
                           k);
      }
    }
    return "";
  }

  std::vector<at::Tensor> run_plain(const std::vector<at::Tensor>& inputs, const std::string& why) {
    ++counters_->plain_runs;
    if (why != reason_) log::info("zenith: {} runs launch by launch this call: {}", what_, why);
    reason_ = why;
    return execute_plan(inputs);
  }

  std::vector<at::Tensor> replay(const std::vector<at::Tensor>& inputs) {
    c10::cuda::CUDAGuard guard(device_);
    follow_last_stream();
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      if (buffers_[i].defined() && buffers_[i].numel() > 0) buffers_[i].copy_(inputs[i]);
    }
    graph_->replay();
    ++counters_->replays;
    std::vector<at::Tensor> outputs;
    outputs.reserve(outputs_.size());
    for (std::size_t k = 0; k < outputs_.size(); ++k) {
      const auto& output = outputs_[k];
      outputs.push_back(k < copied_outputs_ && output.defined() ? output.clone(at::MemoryFormat::Preserve)
                                                                : share_memory(output));
    }
    return outputs;
  }

  std::vector<at::Tensor> capture_and_replay(const std::vector<at::Tensor>& inputs) {
    if (captures_ >= kMaxCaptures) {
      disable(fmt::format("captured {} times and the addresses of its inputs keep moving", captures_));
      return execute_plan(inputs);
    }
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      // Strides are part of the signature: a plan called with such an input always is.
      if (!by_address_[i] && inputs[i].defined() && !inputs[i].is_non_overlapping_and_dense()) {
        disable(fmt::format("input {} has elements that share memory (an expanded tensor), which cannot be copied into "
                            "a buffer of the graph's own",
                            i));
        return execute_plan(inputs);
      }
    }
    ++captures_;
    c10::cuda::CUDAGuard guard(device_);
    // The graph's inputs: by-address ones as they are, the others in buffers of the graph's own.
    std::vector<at::Tensor> graph_inputs(inputs.size());
    buffers_.assign(inputs.size(), at::Tensor());
    addresses_.assign(inputs.size(), nullptr);
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      const auto& input = inputs[i];
      if (by_address_[i] || !input.defined()) {
        graph_inputs[i] = input;
        addresses_[i] = input.defined() ? input.data_ptr() : nullptr;
      } else {
        buffers_[i] = at::empty_strided(input.sizes(), input.strides(), input.options());
        graph_inputs[i] = buffers_[i];
      }
    }
    const auto pool = at::cuda::graph_pool_handle();
    auto graph = std::make_unique<at::cuda::CUDAGraph>();
    std::vector<at::Tensor> outputs;
    std::string failure;
    {
      // Capture needs a stream other than the default; it records work and runs none.
      auto current = at::cuda::getCurrentCUDAStream(device_.index());
      auto side = at::cuda::getStreamFromPool(false, device_.index());
      at::cuda::CUDAEvent ready;
      ready.record(current);
      ready.block(side);
      c10::cuda::CUDAStreamGuard on_side(side);
      graph->register_generator_state(at::cuda::detail::getDefaultCUDAGenerator(device_.index()));
      try {
        graph->capture_begin(pool, cudaStreamCaptureModeThreadLocal);
      } catch (const std::exception& error) {
        failure = fmt::format("the capture could not begin: {}", error.what());
      }
      if (failure.empty()) {
        try {
          outputs = execute_flat(*plan_, graph_inputs, nullptr, derived_.get());
          graph->capture_end();
        } catch (const std::exception& error) {
          failure = error.what();
          outputs.clear();
          abandon_capture(side, pool);
          graph.reset();
          c10::cuda::CUDACachingAllocator::releasePool(device_.index(), pool);
          settle_generator();
        }
      }
      at::cuda::CUDAEvent done;
      done.record(side);
      done.block(current);
    }
    if (!failure.empty()) {
      buffers_.clear();
      ++counters_->failures;
      disable(fmt::format("capturing it as a CUDA graph failed: {}", first_line(failure)));
      return execute_plan(inputs);
    }
    graph_ = std::move(graph);
    derived_moves_ = derived_ ? derived_->moves() : 0;
    outputs_ = std::move(outputs);
    checked_.assign(outputs_.size(), false);
    baseline_.assign(outputs_.size(), 0);
    std::set<const void*> input_storages;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      if (by_address_[i] && inputs[i].defined()) input_storages.insert(inputs[i].storage().unsafeGetStorageImpl());
    }
    for (std::size_t k = copied_outputs_; k < outputs_.size(); ++k) {
      if (!outputs_[k].defined() || input_storages.count(outputs_[k].storage().unsafeGetStorageImpl())) continue;
      checked_[k] = true;
      baseline_[k] = outputs_[k].storage().use_count();
    }
    ++counters_->captures;
    reason_.clear();
    log::info("zenith: {} is captured as a CUDA graph ({} launches replay as one)", what_, plan_->steps.size());
    return replay(inputs);
  }

  // The graph's buffers and outputs are one memory, reused by every replay: a replay on another
  // stream than the last one waits for all that stream has queued so far, which includes the last
  // replay and every read of its outputs the caller queued before letting them go (a result still
  // held blocks the replay, replay_blocker). On the same stream, stream order does it.
  void follow_last_stream() {
    const auto current = at::cuda::getCurrentCUDAStream(device_.index());
    if (last_stream_ && *last_stream_ != current) {
      stream_switch_.record(*last_stream_);
      stream_switch_.block(current);
    }
    last_stream_ = current;
  }

  // Ends a capture that failed midway: CUDA leaves the stream capturing until told, and the
  // caching allocator keeps routing that stream's allocations to the pool.
  void abandon_capture(const c10::cuda::CUDAStream& stream, const at::cuda::MempoolId_t& pool) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream.stream(), &status) == cudaSuccess && status != cudaStreamCaptureStatusNone) {
      cudaGraph_t partial = nullptr;
      if (cudaStreamEndCapture(stream.stream(), &partial) == cudaSuccess && partial != nullptr) cudaGraphDestroy(partial);
    }
    c10::cuda::CUDACachingAllocator::endAllocateToPool(device_.index(), pool);
    (void)cudaGetLastError();  // the capture's error is not the next launch's
  }

  // The generator's capture began with the failed capture and never ended: it would refuse every
  // random number drawn outside a graph from now on. A capture that does end settles it.
  void settle_generator() {
    try {
      auto marker = at::empty({1}, at::TensorOptions().device(device_));
      at::cuda::CUDAGraph graph;
      graph.register_generator_state(at::cuda::detail::getDefaultCUDAGenerator(device_.index()));
      graph.capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
      marker.zero_();  // one node: an empty graph draws a warning
      graph.capture_end();
    } catch (const std::exception& error) {
      log::warn("zenith: after a failed CUDA graph capture of {}, the random generator could not be settled: {}", what_,
                first_line(error.what()));
      (void)cudaGetLastError();
    }
  }

  void drop_graph() {
    outputs_.clear();
    buffers_.clear();
    graph_.reset();
    moved_calls_ = 0;
  }

  void disable(const std::string& why) {
    drop_graph();
    disabled_ = true;
    reason_ = why;
    log::info("zenith: {} runs launch by launch from now on: {}", what_, why);
  }

  static std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

  const std::shared_ptr<const Plan> plan_;
  const std::shared_ptr<const DerivedValues> derived_;
  const std::vector<bool> by_address_;
  const std::size_t copied_outputs_;
  const std::string what_;
  const c10::Device device_;
  const std::shared_ptr<PlanGraphCounters> counters_;
  mutable std::mutex mutex_;
  std::unique_ptr<at::cuda::CUDAGraph> graph_;
  std::vector<at::Tensor> buffers_;    // per input: the graph's copy (undefined: read by address)
  std::vector<const void*> addresses_; // per input read by address: where the graph reads it
  std::vector<at::Tensor> outputs_;    // the graph's outputs, in its pool
  std::vector<bool> checked_;          // per output: in the graph's memory, so a replay overwrites it
  std::vector<std::size_t> baseline_;  // per checked output: its storage's references when nobody else holds it
  std::optional<c10::cuda::CUDAStream> last_stream_;  // where the last replay ran
  at::cuda::CUDAEvent stream_switch_;                 // orders a replay after another stream's work
  std::int64_t calls_ = 0;
  int captures_ = 0;
  int moved_calls_ = 0;
  std::uint64_t derived_moves_ = 0;  // derived_->moves() when the graph was captured
  std::atomic<bool> disabled_{false};  // read without the lock by the backward's caller
  std::string reason_;
};

}  // namespace

std::string plan_graph_refusal(const Plan& plan) {
  std::string why;
  graph_device(plan, why);
  return why;
}

std::unique_ptr<PlanGraph> make_plan_graph(std::shared_ptr<const Plan> plan, std::vector<bool> by_address,
                                           std::size_t copied_outputs, std::string what,
                                           std::shared_ptr<PlanGraphCounters> counters, std::string& why,
                                           std::shared_ptr<const DerivedValues> derived) {
  why.clear();
  auto device = graph_device(*plan, why);
  if (!device) return nullptr;
  if (by_address.size() != plan->graph.inputs.size()) {
    why = fmt::format("{} inputs marked, the plan has {}", by_address.size(), plan->graph.inputs.size());
    return nullptr;
  }
  return std::make_unique<CudaPlanGraph>(std::move(plan), std::move(by_address), copied_outputs, std::move(what),
                                         *device, std::move(counters), std::move(derived));
}

}  // namespace zenith
