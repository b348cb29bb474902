// The executor: runs a Plan on bound inputs.
#pragma once

#include <vector>

#include <ATen/core/ivalue.h>

#include "core/plan.h"

namespace zenith {

/// Runs `plan`. `inputs` holds one tensor per graph input, in graph input order (call tensors,
/// then parameters and buffers). Returns the outputs nested as the graph's output structure.
/// Throws zenith::Error when a backend fails.
c10::IValue execute(const Plan& plan, const std::vector<at::Tensor>& inputs);

/// Runs `plan` and returns its graph outputs flat, in order.
std::vector<at::Tensor> execute_flat(const Plan& plan, const std::vector<at::Tensor>& inputs);

/// Nests flat outputs as `structure` says.
c10::IValue nest_outputs(const ir::OutputStructure& structure, const std::vector<at::Tensor>& flat);

}  // namespace zenith
