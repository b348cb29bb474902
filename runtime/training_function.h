// The autograd glue: a training call is one torch::autograd::Function. Its forward runs the
// forward plan and saves what the backward plan reads; its backward runs the backward plan.
#pragma once

#include <memory>
#include <vector>

#include <ATen/core/ivalue.h>

#include "core/plan.h"

namespace zenith::capture {

/// Runs one call of `plan` on its tensor inputs (arguments, then parameters and buffers) and
/// returns the call's outputs, nested, attached to the autograd graph as one node. Gradients reach
/// the inputs (parameters' .grad included) when backward runs. Backward under create_graph
/// (double backward) throws zenith::Error.
c10::IValue run_training_call(const std::shared_ptr<const TrainingPlan>& plan, const std::vector<at::Tensor>& inputs);

}  // namespace zenith::capture
