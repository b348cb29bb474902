// The engine behind a CompiledModule: signature -> plan cache -> capture, passes, lowering ->
// execution, with eager fallback, verification and dumps. One class, its members defined by
// concept: the call path (engine.cpp), compiling a signature (compile_signature.cpp), symbolic
// plans (symbolic_fitting.cpp), training plans (training_plan.cpp), verification
// (verification.cpp), replay profiles (call_profiling.cpp), parameter packing
// (engine_packing.cpp).
#pragma once

#include <atomic>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "capture/tracer_capture.h"
#include "core/backend.h"
#include "core/plan.h"
#include "runtime/call_tensor_buffers.h"
#include "runtime/derived_values.h"
#include "runtime/plan_cache.h"
#include "runtime/plan_graph.h"
#include "runtime/replay_profile.h"
#include "runtime/signature.h"
#include "runtime/state_layout.h"
#include "runtime/symbolic_plan.h"
#include "zenith/compile.h"

namespace zenith::detail {

class Engine {
 public:
  Engine(ModuleAccess access, CompileOptions options);

  /// Runs one call.
  c10::IValue call(std::vector<c10::IValue> args);
  CompileReport last_report() const;
  CacheStats stats() const;
  const CompileOptions& options() const { return options_; }

 private:
  /// A compiled signature: a plan, or the reason it runs eagerly.
  struct Entry {
    /// The plan; for a training signature, its forward plan.
    std::shared_ptr<const Plan> plan;
    /// Training signatures: the forward and backward plans of the autograd node.
    std::shared_ptr<const TrainingPlan> training;
    std::string eager_reason;
    /// Plans with value checks: runs stopped by a check since the last that passed them all. At
    /// kValueCheckFailuresToGiveUp the value read changes from call to call, and the signature runs
    /// eagerly without trying its plan.
    mutable std::atomic<int> value_check_failures_in_a_row{0};
    /// Inference plans on a CUDA device (CompileOptions::cuda_graphs): the plan replayed as one
    /// CUDA graph from its second call, or null (it runs launch by launch).
    std::shared_ptr<PlanGraph> graph;
    /// Inference plans (CompileOptions::keep_derived_values): what the plan computes from
    /// parameters alone, kept between calls; or null.
    std::shared_ptr<const DerivedValues> derived;
  };
  static constexpr int kValueCheckFailuresToGiveUp = 3;
  struct Compiled {
    std::shared_ptr<const Entry> entry;
    c10::IValue result;  // what the capture's forward returned
  };

  using State = std::vector<std::pair<std::string, at::Tensor>>;

  /// The module's parameters and buffers as a call sees them, read by name only when they changed.
  struct StateSnapshot {
    State state;
    StateLayout layout;                 // state's tensors' layouts when read
    std::size_t fingerprint = 0;        // state_fingerprint of state's tensors
    std::uint64_t generation = 0;       // 1 for the first snapshot, one more for each later one
  };
  struct Hit;
  /// The current snapshot: the last one while access_.state_unchanged() says so and every tensor
  /// keeps its type, else read anew. Takes mutex_, under which it also reads `last_hit`.
  std::shared_ptr<const StateSnapshot> current_state(std::shared_ptr<const Hit>& last_hit);

  /// A signature found in the cache, with its entry.
  struct Hit {
    Signature signature;
    std::shared_ptr<const Entry> entry;
  };

  /// Captures, optimizes and lowers a signature. With `dims`, also captures at probe sizes and fits
  /// a symbolic plan over them (or reports why not in the report's static_reason).
  Compiled compile_signature(const std::vector<c10::IValue>& args, const State& state, const Signature& signature,
                             std::vector<DynamicDim> dims);
  /// An inference capture on CUDA with convolutions: runs them channels-last (CompileOptions::
  /// channels_last) when every result keeps eager's layout, typing the graph from one run of it on
  /// `inputs` (the call's tensors, then parameters and buffers). Logs at info why not when it tried.
  void relayout_for_inference(ir::Graph& graph, const std::vector<at::Tensor>& inputs) const;
  /// Passes and lowering of one capture (for an `inference` plan, or a training step's forward or
  /// backward); throws zenith::Error. Logs each phase's time, naming `part` ("backward", "probe 2")
  /// when the graph is not the call's forward.
  std::shared_ptr<Plan> optimize_and_lower(ir::Graph graph, CompileReport& report, bool inference,
                                           const std::string& part = "") const;
  /// A training signature's plans.
  struct TrainingBuild {
    std::shared_ptr<const TrainingPlan> training;  // or null:
    std::shared_ptr<const Plan> plan;              // no gradient reaches an input: a plain plan
    std::string refusal;                           // or why the signature runs eagerly
    std::string op;                                // the op at fault, when one is
  };
  /// Differentiates a captured forward and plans both directions; throws zenith::Error.
  TrainingBuild plan_training(ir::Graph graph, const std::vector<c10::IValue>& args, const State& state,
                              CompileReport& report);
  /// Gives a training plan its CUDA graphs where they can run (logs why not at info). The forward's
  /// first `arguments` inputs are the call's tensors; the backward's first `saved` inputs are the
  /// values the forward saved.
  void attach_graphs(TrainingPlan& training, std::size_t arguments, std::size_t saved) const;
  /// Gives an inference entry its derived values (CompileOptions::keep_derived_values; unless it
  /// has them already, shared with other sizes) and its
  /// CUDA graph where its plan can be replayed as one (logs why not at info when the plan runs on
  /// CUDA and `say_why`). The plan's last `state` inputs are parameters and buffers.
  void attach_inference_graph(Entry& entry, std::size_t state, bool say_why = true) const;
  /// Captures the forward at the probe sizes of `design` and marks the size-dependent nodes of all
  /// captures, `base` included. Returns why the dims cannot be symbolic, or empty.
  std::string capture_probes(const std::vector<c10::IValue>& args, const State& state, const Signature& signature,
                             const std::vector<DynamicDim>& dims, const std::vector<int>& symbol_of,
                             const capture::ProbeDesign& design,
                             capture::Capture& base, std::vector<capture::Capture>& probes) const;
  /// Lowers the probes and fits the symbolic plan; on success keeps it. Returns why not, or empty.
  std::string fit_symbolic(const std::vector<DynamicDim>& dims, const std::vector<int>& symbol_of,
                           const capture::ProbeDesign& design,
                           const Signature& signature, const std::vector<int>& tensor_arguments,
                           std::shared_ptr<const Plan> base, std::vector<capture::Capture> probes);
  /// An entry for `signature` from a symbolic plan, with its CUDA graph (recorded at the entry's
  /// second call, so only for sizes that recur), or null; `refusal` learns why not. The plans' last
  /// `state` inputs are parameters and buffers.
  std::shared_ptr<const Entry> instantiate_symbolic(const Signature& signature, std::size_t state, std::string& refusal);
  /// The derived values `symbolic`'s base plan and instances share (made at the first ask), or null
  /// (keep_derived_values off, or none). One copy per symbolic plan, not per size.
  std::shared_ptr<const DerivedValues> shared_derived_values(capture::SymbolicPlan& symbolic, std::size_t state);
  /// Whether `capture` read values computed from sizes that may have chosen which ops ran (a forward
  /// with control flow of its own): its plan then holds for these exact sizes only.
  bool reads_pin_sizes(const capture::Capture& capture) const {
    return !capture.reads_from_sizes.empty() && !access_.straight_line;
  }
  /// The dimensions a capture of `signature` should make symbolic.
  std::vector<DynamicDim> dims_to_make_symbolic(const Signature& signature) const;
  /// Whether `entry`'s value checks failed so often in a row that its signature runs eagerly.
  static bool gave_up_checking(const Entry& entry);
  c10::IValue run_plan(const Entry& entry, const Signature& signature, const std::vector<c10::IValue>& args,
                       const StateSnapshot& snapshot);
  /// A plan run stopped by a failed allocation (is_out_of_memory): counts it, then runs the call
  /// eagerly (CompileOptions::eager_on_out_of_memory; never a training call) or throws a
  /// zenith::Error that says so.
  c10::IValue after_out_of_memory(const std::exception& error, const Signature& signature,
                                  const std::vector<c10::IValue>& args, bool training);
  /// A replay profile (CompileOptions::profile_dir): the profile this run of `signature`'s plan
  /// goes into, with a run reserved in it, or null when it is not profiled.
  std::shared_ptr<ReplayProfile> reserve_profile_run(const Signature& signature);
  /// Adds a timed run to its profile and writes the profile's file (a failure is logged).
  void record_profile_run(ReplayProfile& profile, const Plan& plan, const Signature& signature, StepTimer& timer);
  /// Parameter packing (CompileOptions::pack_parameters, runtime/parameter_packing.h): queues
  /// `made` (an entry this call just made, or null), then, when this call is the only one in flight,
  /// moves the parameters whose concatenation the queued plans keep into it. Under mutex_: no other
  /// call starts a plan meanwhile.
  void pack_parameters(const std::shared_ptr<const Entry>& made, const State& state);
  /// Packs the concatenations `entry`'s plan keeps, where they can be; logs what and why not.
  void pack_entry(const Entry& entry, const State& state);
  c10::IValue run_eager(const std::vector<c10::IValue>& args);
  /// Why a call runs eagerly whatever its signature (compile_training off for a training call), or
  /// empty.
  std::string eager_reason(bool training) const;
  /// Whether the call needs gradients: grad mode on and a tensor argument or the state requires one.
  static bool needs_gradients(const std::vector<c10::IValue>& args, const State& state);
  void verify_against_eager(const std::vector<c10::IValue>& args, const c10::IValue& compiled);
  void check_arguments(const std::vector<c10::IValue>& args) const;
  /// CacheStats::kept_bytes: the kept derived values' memory of their own, each storage once.
  /// Under mutex_.
  std::int64_t kept_bytes() const;

  ModuleAccess access_;
  CompileOptions options_;
  std::string backend_options_;  // zn_compile_args.options_json of every compile, made once
  std::vector<const Backend*> backends_;
  mutable std::mutex mutex_;
  PlanCache<Entry> cache_;
  CacheStats stats_;
  std::shared_ptr<PlanGraphCounters> graph_counters_ = std::make_shared<PlanGraphCounters>();
  // The memory of every inference graph of this module (runtime/graph_pool.h); null without CUDA.
  std::shared_ptr<GraphPool> graph_pool_ = make_graph_pool();
  std::shared_ptr<DerivedValueShare> derived_share_ = std::make_shared<DerivedValueShare>();
  CompileReport last_report_;
  std::optional<Signature> last_signature_;
  std::list<capture::SymbolicPlan> symbolic_plans_;  // most recently used first
  std::set<std::string> refused_dims_;              // dims that could not be symbolic, described
  int verified_ = 0;
  std::set<std::string> told_eager_;  // eager reasons already logged
  std::set<std::string> warned_ops_;  // ops without a derivative rule, warned about once each
  struct ProfileSlot {
    std::shared_ptr<ReplayProfile> profile;
    int reserved = 0;  // runs handed out, at most profile_calls
  };
  std::unordered_map<std::size_t, ProfileSlot> profiles_;  // by signature hash
  std::atomic<bool> told_training_profile_{false};  // read and set outside mutex_
  std::shared_ptr<const StateSnapshot> state_;  // current_state()'s last read
  // The last call's hit: a call that repeats its signature (most calls) skips building one and,
  // while no other call replaced it meanwhile, the cache's lookup. Dropped at every insertion into
  // the cache: an entry it evicts is not served on, and the cache's order of use stays the one a
  // lookup at every call would give (a repeated hit is the most recently used entry already,
  // bumped by the lookup that made it).
  std::shared_ptr<const Hit> last_hit_;
  std::uint64_t snapshots_ = 0;        // snapshots made so far: the last one's generation
  CallTensorBuffers call_buffers_;     // the graphed calls' tensor vectors
  std::atomic<int> calls_in_flight_{0};         // calls between their start and their end
  std::vector<std::weak_ptr<const Entry>> to_pack_;  // entries whose parameters wait to be packed
  std::set<std::string> told_packing_;          // packing refusals already logged
};

}  // namespace zenith::detail
