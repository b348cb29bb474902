// Values an inference plan computes from parameters and buffers alone: a weight in the layout a
// convolution wants, a transposed weight, a per-channel scale. Eager computes them at every call;
// they change only when a parameter does. A plan's DerivedValues computes them once, keeps them,
// and computes them again before the first call that sees a source changed:
//   - updated in place (an optimizer step, copy_ under NoGradGuard): its version counter moved;
//   - replaced (assigned another tensor, set_data): another tensor or another address.
// A write that bypasses the version counter (through `.data`, or a raw pointer) is not seen:
// CompileOptions::keep_derived_values says so, and turning it off computes them at every call.
// A call whose argument is a source's memory (the forward could write it in mid-call) runs every
// step in order instead (shares_memory_with_arguments).
//
// Kept values the derivation made in memory of its own keep their address when computed again
// (the new values are copied into them), so a CUDA graph that read them stays valid.
//
// The plans of one compiled module share their kept values (DerivedValueShare): a value derived
// the same way (the same ops, arguments and types over the same parameters and buffers) by the
// plans of several signatures (a prompt's and a decode step's; a size's own plan and a symbolic
// plan) is held once and computed once per change of its sources. A module whose derived values
// are concatenated weights would otherwise hold them once per signature.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "core/plan.h"

namespace zenith {

/// What a parameter or buffer was when a value was derived from it.
struct SourceSeen {
  const void* impl = nullptr;
  const void* data = nullptr;
  std::uint32_t version = 0;
  bool tracked = true;  ///< false for inference tensors, which keep no version counter
  bool operator==(const SourceSeen& other) const {
    return tracked && other.tracked && impl == other.impl && data == other.data && version == other.version;
  }
  static SourceSeen of(const at::Tensor& tensor);
};

/// What the derived values of every plan of one compiled module share: a counter, and the kept
/// values by how they are derived.
struct DerivedValueShare {
  std::atomic<std::int64_t> computations{0};  ///< times a plan's derived values were computed

  /// One kept value: its memory, and its sources as they were when it was computed (in the order
  /// of the state indices its key names).
  struct Kept {
    at::Tensor tensor;
    bool own_memory = false;  ///< false: a view of a source, rebound when computed again
    std::vector<SourceSeen> seen;
  };
  std::mutex mutex;
  std::map<std::string, Kept> kept;  ///< by derivation: ops, arguments and types from the sources

  /// Adds the bytes of the kept values held here in memory of their own to `bytes_by_storage`,
  /// keyed by storage so that memory several holders share counts once (CacheStats::kept_bytes).
  void count_own_memory(std::map<const void*, std::int64_t>& bytes_by_storage);
};

class DerivedValues {
 public:
  /// The derived values of `plan`, whose last `state` inputs are parameters and buffers, or null
  /// when it has none. A step is derived when it reads only parameters, buffers, constants and
  /// other derived steps' results, writes nothing in place, draws no random numbers, does not depend
  /// on sizes, runs no node marked to run at every call (ir::Node::per_call), and makes nothing that the caller gets (a result, or a view a result is of) or a
  /// later step writes. Plans with value checks have none.
  static std::shared_ptr<const DerivedValues> of(std::shared_ptr<const Plan> plan, std::size_t state,
                                                 std::shared_ptr<DerivedValueShare> share);

  /// Whether step `index` of the plan is derived: execute_flat skips it and reads the kept values.
  bool derived(std::size_t index) const { return derived_steps_[index]; }
  /// Number of derived steps, and of kept values (those steps' results read at every call).
  std::size_t step_count() const;
  std::size_t kept_count() const { return kept_.size(); }
  /// Adds the bytes of this plan's kept values that are held in memory of their own (not views of
  /// a parameter, buffer or constant) to `bytes_by_storage`, keyed by storage.
  void count_own_memory(std::map<const void*, std::int64_t>& bytes_by_storage) const;

  /// Computes the kept values again when a source changed since they were computed (or when they
  /// never were), from `inputs` (one per graph input, in order). Never inside a CUDA graph
  /// capture: a computation waits for its device to finish it, so that a call on another stream
  /// reads finished values.
  void update(const std::vector<at::Tensor>& inputs) const;
  /// update, then puts the kept values into `values` (by graph value id).
  void bind(const std::vector<at::Tensor>& inputs, std::vector<at::Tensor>& values) const;
  /// Whether a call argument (one of `inputs` before the parameters and buffers) shares memory
  /// with a parameter, buffer or constant the derived steps read: the forward could write that
  /// memory through the argument in the middle of the call, after the kept values were computed,
  /// and a step after the write must see it. Such a call runs every step in order (execute_flat
  /// does so, and a plan's CUDA graph runs that call launch by launch).
  bool shares_memory_with_arguments(const std::vector<at::Tensor>& inputs) const;
  /// Counts the computations that moved a kept value to another address (a view of a parameter
  /// that was replaced, say): a CUDA graph captured over the old address must not replay.
  std::uint64_t moves() const { return moves_; }
  /// The derived concatenations of parameters and buffers alone (one `aten::cat` along
  /// dimension 0 a step, as the sibling-products rewrite makes): per concatenation, the indices
  /// among the parameters and buffers (the plan's last inputs) of the tensors it joins, in order.
  /// Where those tensors lie one after another in one storage
  /// (runtime/parameter_packing.h), the concatenation is a view of them, not a copy.
  const std::vector<std::vector<std::size_t>>& state_concatenations() const { return state_concatenations_; }
  /// Whether the engine has packed the parameters of state_concatenations() (or found that it
  /// cannot): once for all plans that share these derived values (a symbolic plan's sizes).
  bool packing_done() const { return packing_done_; }
  void mark_packing_done() const { packing_done_ = true; }

 private:
  DerivedValues(std::shared_ptr<const Plan> plan, std::vector<bool> derived_steps, std::vector<std::size_t> sources,
                std::vector<int> kept, std::vector<std::string> keys, std::vector<std::vector<std::size_t>> kept_sources,
                std::size_t arguments, std::shared_ptr<DerivedValueShare> share);

  // Runs derived step `s` into `values`; a concatenation of tensors that lie one after another is
  // a view of them.
  void run_derived_step(std::size_t s, std::vector<at::Tensor>& values) const;

  bool current(const std::vector<at::Tensor>& inputs) const;  // takes mutex_
  // Per kept value, what another plan of the module computed from the sources as they are now
  // (an undefined tensor where there is none, or it is stale or not shared).
  std::vector<DerivedValueShare::Kept> shared_now(const std::vector<at::Tensor>& inputs) const;
  void compute(const std::vector<at::Tensor>& inputs) const;  // takes mutex_
  // Puts the kept values it computed where the module's other plans find them (into the memory
  // one of them already holds, when there is one); sets `moved` when a kept value moved there.
  // The caller waits for the device (finish) afterwards.
  void share_kept(const std::vector<at::Tensor>& inputs, bool& moved) const;
  void record_seen(const std::vector<at::Tensor>& inputs) const;

  const std::shared_ptr<const Plan> plan_;
  const std::vector<bool> derived_steps_;
  const std::vector<std::size_t> sources_;  // indices into the plan's inputs the derived steps read
  const std::vector<int> kept_;             // value ids of derived results that other steps read
  const std::vector<std::string> keys_;     // per kept value: its derivation, empty when not shared
  const std::vector<std::vector<std::size_t>> kept_sources_;  // per kept value: its state indices
  const std::size_t arguments_;             // inputs before the parameters and buffers
  std::vector<std::vector<int>> concatenated_;  // per step: the value ids one aten::cat along dim 0 joins
  std::vector<at::Tensor> constant_sources_;  // the constants the derived steps read
  std::vector<std::vector<std::size_t>> state_concatenations_;
  const std::shared_ptr<DerivedValueShare> share_;
  mutable std::mutex mutex_;
  mutable std::vector<SourceSeen> seen_;       // per source, when computed; empty: never computed
  mutable std::vector<at::Tensor> tensors_;    // per kept value
  mutable std::vector<bool> own_memory_;       // per kept value: in memory no source shares
  mutable std::atomic<std::uint64_t> moves_{0};
  mutable std::atomic<bool> packing_done_{false};
};

}  // namespace zenith
