// A plan replayed as one CUDA graph: the whole call's launches cost one launch on the host. A
// training step of a convolutional network makes hundreds of small launches, and without a graph
// the GPU waits on the host between them.
//
// The graph reads the addresses it was captured with, so a replay is only correct when:
//   - every input read by address is at its captured address (parameters, buffers, and the values
//     a graphed forward saved); other inputs are copied into the graph's own buffers first;
//   - nothing still holds an output of the previous replay, which this one overwrites (the saved
//     values of a call whose backward has not run, a gradient kept in .grad).
// When either fails, the call runs the plan launch by launch instead: slower, never wrong.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "core/plan.h"

namespace zenith {

class DerivedValues;
class GraphPool;

/// Counters shared by every graphed plan of one compiled module.
struct PlanGraphCounters {
  std::atomic<std::int64_t> captures{0};       ///< graphs captured
  std::atomic<std::int64_t> replays{0};        ///< calls served by a replay
  std::atomic<std::int64_t> plain_runs{0};     ///< calls of a captured graph run launch by launch instead
  std::atomic<std::int64_t> failures{0};       ///< plans whose capture failed (they run launch by launch)
};

/// A plan and its CUDA graph. Thread-safe: calls are serialized.
class PlanGraph {
 public:
  virtual ~PlanGraph() = default;

  /// Runs the plan on `inputs` (graph input order) and returns its outputs flat, as
  /// execute_flat does. The first call runs launch by launch (the libraries initialize lazily, which
  /// must not happen inside a capture); the second captures the graph and replays it. Outputs a
  /// replay hands out in place live in the graph's memory until the next replay: the graph checks
  /// that nothing holds them before it overwrites them.
  virtual std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs) = 0;

  /// Graphs are off for this plan for good (a failed capture, inputs that keep moving): every call
  /// runs launch by launch.
  virtual bool disabled() const = 0;
};

/// Empty when `plan` can be replayed as a CUDA graph in this build, else why not: every kernel
/// step must run on one CUDA device, from a backend that declares it graph-safe
/// (zn_compile_args.graph_safe), and the plan must have kernel steps.
std::string plan_graph_refusal(const Plan& plan);

/// A graph for `plan`, or null (with `why` set) when plan_graph_refusal says no. `by_address[i]`
/// says input i is read where it lies (it keeps its address from call to call); other inputs are
/// copied into buffers the graph owns. The first `copied_outputs` outputs are copied out of the
/// graph's memory at every replay (the caller's to keep: a call's results); the others are handed
/// out in place and checked before the next replay. `what` names the plan in logs ("the training
/// forward of module"). `counters` may be null. With `derived` (the plan's DerivedValues), the
/// graph holds the launches of the other steps only: the kept values are brought up to date before
/// every run, outside the graph, and read where they lie.
///
/// A graph that copies every output (`copied_outputs` is the plan's output count) keeps none of its
/// memory past a capture: its inputs' buffers, intermediates and outputs go back to its pool, for
/// the next capture into the pool to reuse, and every replay writes them anew. Such graphs may share
/// `pool` (runtime/graph_pool.h: one module's inference graphs); a graph that hands outputs out in
/// place may not (the next graph's replay would overwrite them): `why` says so and null comes back.
/// Null `pool`: the graph gets one of its own.
std::unique_ptr<PlanGraph> make_plan_graph(std::shared_ptr<const Plan> plan, std::vector<bool> by_address,
                                           std::size_t copied_outputs, std::string what,
                                           std::shared_ptr<PlanGraphCounters> counters, std::string& why,
                                           std::shared_ptr<const DerivedValues> derived = nullptr,
                                           std::shared_ptr<GraphPool> pool = nullptr);

/// A pool for the graphs of one compiled module to share (make_plan_graph's `pool`); null when
/// this LibTorch has no CUDA. Makes no CUDA call until a graph is captured into it.
std::shared_ptr<GraphPool> make_graph_pool();

}  // namespace zenith
