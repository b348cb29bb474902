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
  /// Kernel steps: the device the kernel runs on, whose current stream a launch uses.
  c10::Device device = c10::Device(c10::kCPU);
  /// Kernel steps: the kernel serves other sizes of its group (CompileOutcome::shape_generic) up to
  /// `max_extent` elements (0: any).
  bool shape_generic = false;
  std::int64_t max_extent = 0;
};

/// A compiled signature.
struct Plan {
  /// The optimized graph the steps run.
  ir::Graph graph;
  std::vector<Step> steps;
};

}  // namespace zenith
