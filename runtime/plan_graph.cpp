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
#include <ATen/cuda/EmptyTensor.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <fmt/format.h>

#include "runtime/derived_values.h"
#include "runtime/device_copy.h"
#include "runtime/executor.h"
#include "runtime/graph_copy_nodes.h"
#include "runtime/graph_memset_nodes.h"
#include "runtime/graph_pool.h"
#include "runtime/graph_registration.h"
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

// A tensor at `source`'s address that does not keep its memory: a staged graph's buffer or
// output, whose memory goes back to the pool once the capture ends and which only the graph's own
// replays use (the pool's lock and stream order keep other graphs' replays out of the way).
at::Tensor unowned(const at::Tensor& source) {
  if (!source.defined() || source.numel() == 0) return source;  // nothing in the pool
  return at::from_blob(source.data_ptr(), source.sizes(), source.strides(), source.options());
}

class CudaPlanGraph final : public PlanGraph {
 public:
  CudaPlanGraph(std::shared_ptr<const Plan> plan, std::vector<bool> by_address, std::size_t copied_outputs,
                std::string what, c10::Device device, std::shared_ptr<PlanGraphCounters> counters,
                std::shared_ptr<const DerivedValues> derived, std::shared_ptr<GraphPool> pool)
      : plan_(std::move(plan)),
        derived_(std::move(derived)),
        unwritten_(unwritten_inputs(*plan_, derived_.get())),
        by_address_(std::move(by_address)),
        copied_outputs_(copied_outputs),
        staged_(copied_outputs_ >= plan_->graph.outputs.size()),
        what_(std::move(what)),
        device_(device),
        counters_(counters ? std::move(counters) : std::make_shared<PlanGraphCounters>()),
        pool_(pool ? std::move(pool) : std::make_shared<GraphPool>()) {}

  ~CudaPlanGraph() override {
    // Tensors in the graph's pool go before the pool does.
    drop_graph();
  }

  std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs) override {
    std::lock_guard<std::mutex> lock(mutex_);
    // Before any capture or replay: computing them waits for the device, which a capture cannot.
    if (derived_) derived_->update(inputs);
    if (disabled_) return execute_plan(inputs);
    // Inside a CUDA graph the application records around the call, the plan's launches are what
    // it records, as eager's would be: a graph of ours replayed, or recorded on our side stream,
    // would be joined to the application's capture or fail inside it.
    if (application_capturing()) {
      return graph_ ? run_plain(inputs, "the application is recording a CUDA graph around the call")
                    : execute_plan(inputs);
    }
    // The graph reads kept values it would not see written through the argument.
    if (derived_ && derived_->shares_memory_with_arguments(inputs)) {
      return run_plain(inputs, "an argument shares memory with a parameter its kept values come from");
    }
    if (graph_) {
      if (auto why = replay_blocker(inputs); !why.empty()) return run_plain(inputs, why);
      moved_calls_ = 0;
      const auto pool_lock = pool_->lock();
      return replay(inputs);
    }
    if (calls_++ == 0) return execute_plan(inputs);
    const auto pool_lock = pool_->lock();
    return capture_and_replay(inputs);
  }

  bool disabled() const override { return disabled_; }

 private:
  // Whether the call's stream is being captured by someone else's CUDA graph.
  bool application_capturing() const {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    const auto stream = at::cuda::getCurrentCUDAStream(device_.index());
    if (cudaStreamIsCapturing(stream.stream(), &status) != cudaSuccess) {
      // The legacy default stream while another blocking stream captures: the runtime's error is
      // not the next launch's, and the plan's own handling of a failed capture or replay follows.
      (void)cudaGetLastError();
      return false;
    }
    return status != cudaStreamCaptureStatusNone;
  }

  std::vector<at::Tensor> execute_plan(const std::vector<at::Tensor>& inputs) {
    return execute_flat(*plan_, inputs, nullptr, derived_.get());
  }

  // Why the held graph cannot serve `inputs`, or empty.
  std::string replay_blocker(const std::vector<at::Tensor>& inputs) {
    if (derived_ && derived_->moves() != derived_moves_) {
      if (++moved_calls_ >= kMovedCallsBeforeRecapture) drop_graph();
      return "a value derived from parameters moved since the graph was captured (a parameter was replaced)";
    }
    for (std::size_t i = 0; i < input_copies_.size(); ++i) {
      if (input_copies_[i].node != nullptr && !same_dense_layout(buffers_[i], inputs[i])) {
        return fmt::format("input {} is not laid out as the graph's copy of it reads it (a lazy conjugate or "
                           "negation, or memory shared with the graph's own)",
                           i);
      }
    }
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      if (!by_address_[i] || !inputs[i].defined()) continue;
      // const_data_ptr: data_ptr's copy-on-write check would run for every parameter of every call.
      if (inputs[i].const_data_ptr() != addresses_[i]) {
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

  // Under the pool's lock.
  std::vector<at::Tensor> replay(const std::vector<at::Tensor>& inputs) {
    c10::cuda::CUDAGuard guard(device_);
    // The buffers and outputs are memory other graphs of the pool reuse, and this graph's own
    // last replay's: this one comes after all of them and after the reads of their outputs queued
    // so far (a result still held in place blocks the replay, replay_blocker). On the last
    // replay's stream, stream order does it.
    pool_->follow_last_replay(device_.index());
    // Results the graph copies out itself go to memory of the call's own, allocated on its stream
    // (straight from the CUDA allocator: the dispatcher's empty_strided took half as long again as
    // the graph's launch in an H200 profile of BERT-base b1).
    std::vector<at::Tensor> outputs(outputs_.size());
    for (std::size_t k = 0; k < outputs_.size(); ++k) {
      if (output_copies_[k].node == nullptr) continue;
      outputs[k] = at::Tensor(at::detail::empty_strided_cuda(outputs_[k].sizes(), outputs_[k].strides(),
                                                             outputs_[k].scalar_type(), device_));
    }
    if (auto why = point_copies(inputs, outputs); !why.empty()) {
      disable(fmt::format("the graph's copies in and out could not follow the call's tensors: {}", why));
      return execute_plan(inputs);
    }
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      if (input_copies_[i].node == nullptr && buffers_[i].defined() && buffers_[i].numel() > 0) {
        copy_into(buffers_[i], inputs[i]);
      }
    }
    graph_->replay();
    ++counters_->replays;
    for (std::size_t k = 0; k < outputs_.size(); ++k) {
      if (output_copies_[k].node != nullptr) continue;
      const auto& output = outputs_[k];
      outputs[k] = k < copied_outputs_ && output.defined() ? copy_of(output) : share_memory(output);
    }
    return outputs;
  }

  // Points the graph's copy nodes at the call's inputs and at the memory of its `outputs`, or why
  // CUDA refused.
  std::string point_copies(const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs) {
    const auto exec = graph_->raw_cuda_graph_exec();
    try {
      for (std::size_t i = 0; i < inputs.size(); ++i) {
        auto& copy = input_copies_[i];
        if (copy.node != nullptr) repoint(exec, copy, copy.destination, inputs[i].const_data_ptr());
      }
      for (std::size_t k = 0; k < outputs.size(); ++k) {
        auto& copy = output_copies_[k];
        if (copy.node != nullptr) repoint(exec, copy, outputs[k].data_ptr(), copy.source);
      }
    } catch (const std::exception& error) {
      return error.what();
    }
    return "";
  }

  // Under the pool's lock.
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
    // The graph's inputs: by-address ones as they are, the others in buffers of the graph's own,
    // made in the pool during the capture when the graph is staged.
    std::vector<at::Tensor> graph_inputs(inputs.size());
    addresses_.assign(inputs.size(), nullptr);
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      if (by_address_[i] || !inputs[i].defined()) {
        graph_inputs[i] = inputs[i];
        addresses_[i] = inputs[i].defined() ? inputs[i].data_ptr() : nullptr;
      }
    }
    auto make_buffers = [&] {
      for (std::size_t i = 0; i < inputs.size(); ++i) {
        if (graph_inputs[i].defined() || !inputs[i].defined()) continue;
        graph_inputs[i] = at::empty_strided(inputs[i].sizes(), inputs[i].strides(), inputs[i].options());
      }
    };
    if (!staged_) make_buffers();
    c10::MempoolId_t pool;
    try {
      pool = pool_->id(device_.index());
    } catch (const std::exception& error) {
      ++counters_->failures;
      settle_generator();
      disable(fmt::format("its memory pool could not be made: {}", first_line(error.what())));
      return execute_plan(inputs);
    }
    std::vector<at::Tensor> outputs;
    std::string failure;
    // From its registration with the generator to its end, one capture in the process at a time.
    auto registration = lock_graph_registration();
    // Kept: the copy nodes are found in the captured graph, and CUDA re-points a node of an
    // executable graph through the graph it was made from, which must live as long.
    auto graph = make_locked_graph(/*keep_graph=*/true);
    std::vector<CopyNode> input_copies, output_copies;
    std::vector<at::Tensor> scratch;  // record_output_copies' destinations, kept until the capture ends
    MemsetRewrite memsets;
    // After a failure: the capture's tensors, in its pool, go before the pool and the graph do.
    auto let_capture_memory_go = [&] {
      outputs.clear();
      scratch.clear();
    };
    {
      // Capture needs a stream other than the default; it records work and runs none.
      auto current = at::cuda::getCurrentCUDAStream(device_.index());
      auto side = pool_->capture_stream(device_.index());
      at::cuda::CUDAEvent ready;
      ready.record(current);
      ready.block(side);
      c10::cuda::CUDAStreamGuard on_side(side);
      graph->register_generator_state(at::cuda::detail::getDefaultCUDAGenerator(device_.index()));
      try {
        graph->capture_begin(pool, cudaStreamCaptureModeThreadLocal);
      } catch (const std::exception& error) {
        failure = fmt::format("the capture could not begin: {}", error.what());
        // capture_begin readies the generator for a capture before it can fail.
        graph.reset();
        settle_generator();
      }
      if (failure.empty()) {
        try {
          // Allocated on the capturing stream, the buffers come from the pool (nothing runs: the
          // graph's own copy nodes, or replay() before the launch, copy the call's tensors in).
          if (staged_) make_buffers();
          // The call's inputs copied in by the graph, where a memcpy can (record_input_copies).
          input_copies = record_input_copies(inputs, graph_inputs, side.stream());
          // Recorded into the plan's own graph: the kernels may read what nothing in it writes
          // early (runtime/unwritten_inputs.h), unless that memory is also an input it may write.
          const auto unwritten = read_only_memory_shared(*plan_, graph_inputs) ? nothing_unwritten(unwritten_) : unwritten_;
          outputs = execute_flat(*plan_, graph_inputs, nullptr, derived_.get(), &unwritten);
          output_copies = record_output_copies(outputs, side.stream(), scratch);
          graph->capture_end();
        } catch (const std::exception& error) {
          failure = error.what();
          let_capture_memory_go();
          abandon_capture(side, pool);
          graph.reset();
          c10::cuda::CUDACachingAllocator::releasePool(device_.index(), pool);
          settle_generator();
        }
      }
      if (failure.empty()) {
        // The capture has ended: a failure from here on drops the graph as any dropped graph.
        try {
          find_copy_nodes(graph->raw_cuda_graph(), copy_nodes(input_copies, output_copies));
          scratch.clear();
          memsets = rewrite_memsets(graph->raw_cuda_graph());
          graph->instantiate();
        } catch (const std::exception& error) {
          failure = error.what();
          let_capture_memory_go();
          graph.reset();
        }
      }
      at::cuda::CUDAEvent done;
      done.record(side);
      done.block(current);
    }
    registration.unlock();
    if (!failure.empty()) {
      ++counters_->failures;
      disable(fmt::format("capturing it as a CUDA graph failed: {}", first_line(failure)));
      return execute_plan(inputs);
    }
    graph_ = std::move(graph);
    input_copies_ = std::move(input_copies);
    output_copies_ = std::move(output_copies);
    derived_moves_ = derived_ ? derived_->moves() : 0;
    buffers_.assign(inputs.size(), at::Tensor());
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      if (!by_address_[i]) buffers_[i] = staged_ ? unowned(graph_inputs[i]) : graph_inputs[i];
    }
    outputs_ = std::move(outputs);
    if (staged_) {
      // Every output is copied out at each replay, so none needs its memory past it: with the
      // buffers, they go back to the pool when this function lets the capture's tensors go.
      for (auto& output : outputs_) output = unowned(output);
    }
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
    log::info("zenith: {} is captured as a CUDA graph ({} launches replay as one{})", what_, plan_->steps.size(),
              memsets.rewritten > 0 ? fmt::format("; {} memset nodes as memcpy nodes", memsets.rewritten) : "");
    return replay(inputs);
  }

  // During the capture, on its stream: the copy of each input the graph holds in a buffer of its
  // own, where the call's tensor and the buffer lay the same bytes out; per input, an empty
  // CopyNode for the others (replay() copies them before the launch).
  std::vector<CopyNode> record_input_copies(const std::vector<at::Tensor>& inputs,
                                            const std::vector<at::Tensor>& graph_inputs, cudaStream_t stream) const {
    std::vector<CopyNode> copies(inputs.size());
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      if (by_address_[i] || !inputs[i].defined() || inputs[i].numel() == 0) continue;
      if (same_dense_layout(graph_inputs[i], inputs[i])) copies[i] = capture_copy(graph_inputs[i], inputs[i], stream);
    }
    return copies;
  }

  // During the capture, on its stream: per output, the copy of each result the caller gets a copy
  // of, where a memcpy can copy it (an empty CopyNode for the others), into scratch memory of the
  // capture's that no launch ever writes: replay() points every node at the call's own memory
  // before each launch. The scratch tensors stay in `scratch` until the capture has ended, so that
  // no two nodes copy from one address to one address (a forward returning a tensor twice, or a
  // tensor and a view of it at its start) and find_copy_nodes tells them apart.
  std::vector<CopyNode> record_output_copies(const std::vector<at::Tensor>& outputs, cudaStream_t stream,
                                             std::vector<at::Tensor>& scratch) const {
    std::vector<CopyNode> copies(outputs.size());
    for (std::size_t k = 0; k < outputs.size() && k < copied_outputs_; ++k) {
      const auto& output = outputs[k];
      if (!output.defined() || output.numel() == 0 || !plain_dense(output)) continue;
      scratch.push_back(at::empty_strided(output.sizes(), output.strides(), output.options()));
      copies[k] = capture_copy(scratch.back(), output, stream);
    }
    return copies;
  }

  static std::vector<CopyNode*> copy_nodes(std::vector<CopyNode>& input_copies, std::vector<CopyNode>& output_copies) {
    std::vector<CopyNode*> copies;
    for (auto* list : {&input_copies, &output_copies}) {
      for (auto& copy : *list) {
        if (copy.source != nullptr) copies.push_back(&copy);
      }
    }
    return copies;
  }

  // The captured graph's memset nodes as memcpy nodes (runtime/graph_memset_nodes.h: each memset
  // costs a launch about a microsecond of host time). The rewrite only saves time: where it fails,
  // the graph still writes the same bytes (a memset may be doubled by its copy), so it is launched
  // as it stands.
  MemsetRewrite rewrite_memsets(cudaGraph_t graph) const {
    try {
      return memsets_as_copies(graph, device_.index());
    } catch (const std::exception& error) {
      log::info("zenith: {} keeps memset nodes in its CUDA graph (those not rewritten when this failed): {}", what_,
                first_line(error.what()));
      return {};
    }
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
      const auto registration = lock_graph_registration();
      auto graph = make_locked_graph();
      graph->register_generator_state(at::cuda::detail::getDefaultCUDAGenerator(device_.index()));
      graph->capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
      marker.zero_();  // one node: an empty graph draws a warning
      graph->capture_end();
    } catch (const std::exception& error) {
      log::warn("zenith: after a failed CUDA graph capture of {}, the random generator could not be settled: {}", what_,
                first_line(error.what()));
      (void)cudaGetLastError();
    }
  }

  void drop_graph() {
    outputs_.clear();
    buffers_.clear();
    input_copies_.clear();
    output_copies_.clear();
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
  const UnwrittenInputs unwritten_;  // what each kernel step may read early in the graph
  const std::vector<bool> by_address_;
  const std::size_t copied_outputs_;
  // Every output is copied out: the graph keeps no memory past its capture (make_plan_graph).
  const bool staged_;
  const std::string what_;
  const c10::Device device_;
  const std::shared_ptr<PlanGraphCounters> counters_;
  const std::shared_ptr<GraphPool> pool_;
  mutable std::mutex mutex_;
  LockedGraph graph_;
  std::vector<at::Tensor> buffers_;    // per input: the graph's copy (undefined: read by address); unowned when staged
  std::vector<const void*> addresses_; // per input read by address: where the graph reads it
  std::vector<at::Tensor> outputs_;    // the graph's outputs, in its pool; unowned when staged
  std::vector<CopyNode> input_copies_;   // per input: the graph's memcpy node into its buffer, or none
  std::vector<CopyNode> output_copies_;  // per output: the graph's memcpy node out of it, or none
  std::vector<bool> checked_;          // per output: in the graph's memory, so a replay overwrites it
  std::vector<std::size_t> baseline_;  // per checked output: its storage's references when nobody else holds it
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
                                           std::shared_ptr<const DerivedValues> derived,
                                           std::shared_ptr<GraphPool> pool) {
  why.clear();
  auto device = graph_device(*plan, why);
  if (!device) return nullptr;
  if (by_address.size() != plan->graph.inputs.size()) {
    why = fmt::format("{} inputs marked, the plan has {}", by_address.size(), plan->graph.inputs.size());
    return nullptr;
  }
  if (pool && copied_outputs < plan->graph.outputs.size()) {
    why = fmt::format("it hands {} of its {} outputs out in place, which another graph's replay in a shared pool would "
                      "overwrite",
                      plan->graph.outputs.size() - copied_outputs, plan->graph.outputs.size());
    return nullptr;
  }
  return std::make_unique<CudaPlanGraph>(std::move(plan), std::move(by_address), copied_outputs, std::move(what),
                                         *device, std::move(counters), std::move(derived), std::move(pool));
}

std::shared_ptr<GraphPool> make_graph_pool() { return std::make_shared<GraphPool>(); }

}  // namespace zenith
