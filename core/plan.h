// Plan: what one signature runs at every call, the output of compilation.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/aten_call.h"
#include "core/backend.h"
#include "core/graph.h"

namespace zenith {

class PlanGraph;

/// One step of a plan.
struct Step {
  /// Host steps run a view op through the dispatcher (aliasing is kept exact); kernel steps run a
  /// group on a backend.
  enum class Kind { Host, Kernel };
  Kind kind = Kind::Kernel;
  /// Host steps: the op, bound.
  std::shared_ptr<const ir::AtenCall> host_call;
  /// Kernel steps: the compiled group.
  std::shared_ptr<Kernel> kernel;
  /// Backend name, or "host".
  std::string backend;
  /// Graph value ids read and written, in the group's order.
  std::vector<int> inputs, outputs;
  /// Per output: index into `inputs` whose memory it is (in-place), or -1 (allocated by the host).
  std::vector<int> output_aliases;
  /// Per output: the exact type to allocate.
  std::vector<ir::TensorType> output_types;
  /// Values whose last reader is this step: dropped after it so memory returns to the allocator.
  std::vector<int> release_after;
  /// Indices of the graph nodes this step runs.
  std::vector<int> nodes;
  /// Kernel steps: why each backend of higher priority declined the group ("name: reason"), so that
  /// a report can say why the group went where it went.
  std::vector<std::string> declined;
  /// Kernel steps: the device the kernel runs on, whose current stream a launch uses.
  c10::Device device = c10::Device(c10::kCPU);
  /// Kernel steps: the kernel serves other sizes of its group (CompileOutcome::shape_generic) up to
  /// `max_extent` elements (0: any).
  bool shape_generic = false;
  std::int64_t max_extent = 0;
};

/// A value the forward read into C++ (`.item()`, `at::equal`) from data a call brings, in place of
/// the op that read it: the trace after the read holds only for the value read then, so the plan
/// compares the value with it as soon as a step has computed it.
struct ValueCheck {
  /// The graph value (one of the graph's outputs) compared.
  int value = -1;
  /// What the capture read: the check passes when the value equals it exactly (NaN never does).
  at::Tensor expected;
  /// The op that read it, e.g. "aten::item".
  std::string op;
  /// The step after which it is compared; -1: before the first (the value is a graph input).
  int after_step = -1;
};

/// A compiled signature.
struct Plan {
  /// The optimized graph the steps run.
  ir::Graph graph;
  std::vector<Step> steps;
  /// Values checked while the plan runs, in step order; a failed check stops the run (the call
  /// then runs eagerly). Plans with checks have no effects a caller could see before a check.
  std::vector<ValueCheck> value_checks;
};

/// A compiled training signature: a call is one autograd node whose forward runs `forward` and
/// whose backward runs `backward`.
struct TrainingPlan {
  /// Outputs: the call's outputs (flat), then the values the backward reads.
  std::shared_ptr<const Plan> forward;
  /// Inputs: the values `forward` saved, then the gradients of some call outputs. Outputs: the
  /// gradients of some call inputs.
  std::shared_ptr<const Plan> backward;
  /// Leading outputs of `forward` the call returns, and how they nest.
  std::size_t call_outputs = 0;
  ir::OutputStructure output_structure;
  /// Per call output: it carries a gradient (others are marked non-differentiable).
  std::vector<bool> differentiable;
  /// Per trailing input of `backward`: the call output whose gradient it is, and its exact type.
  std::vector<int> output_gradients;
  std::vector<ir::TensorType> gradient_types;
  /// Per output of `backward`: the call's tensor input (arguments, then parameters and buffers)
  /// whose gradient it is.
  std::vector<int> input_gradients;
  /// Tensor inputs of a call.
  std::size_t inputs = 0;
  /// CUDA graphs of `forward` and `backward` (CompileOptions::cuda_graphs), or null: the plan runs
  /// launch by launch.
  std::shared_ptr<PlanGraph> forward_graph, backward_graph;
};

}  // namespace zenith
