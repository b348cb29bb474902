// Channels-last convolutions for an inference capture (passes/channels_last_convolutions.h): the
// rewrite adds channels-last copies of the call's tensor and of each weight, and one run of the
// forward on the call's tensors says what layout ATen gives every value after them. Eager NCHW
// convolutions on CUDA pay for cuDNN's transposes around each one; the plan pays for one copy of
// the call's tensor, and the weights' copies read parameters alone, so the plan keeps them
// (runtime/derived_values.h).
#pragma once

#include <limits>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "core/graph.h"

namespace zenith::capture {

/// Makes `graph`'s 2-D convolutions channels-last and types every value from one run of it on
/// `inputs` (one per graph input: the call's tensors, then parameters and buffers), holding no more
/// memory at once than eager does. Returns whether it did; `graph` is untouched when not. `why` says
/// why it declined a graph with convolutions to rewrite (on CUDA unless `cuda_only` is false): a
/// result that would come back in another layout than eager's, or a run that failed; empty when
/// there was nothing to rewrite. `kept_fraction`: weights larger than this many times their
/// convolution's result get no channels-last copy (passes/channels_last_convolutions.h).
bool channels_last_for_inference(ir::Graph& graph, const std::vector<at::Tensor>& inputs, std::string& why,
                                 bool cuda_only = true,
                                 double kept_fraction = std::numeric_limits<double>::infinity());

}  // namespace zenith::capture
