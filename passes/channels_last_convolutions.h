// Channels-last convolutions on CUDA: cuDNN's float32 convolution kernels work in NHWC, so on NCHW
// tensors it transposes the input, the weight and the output around every convolution, forward and
// backward (1.9 ms of a 18 ms ResNet-50 training step at batch 32 on the H200; 1.2 ms of a 6.4 ms
// inference call at batch 64). Reading channels-last copies of the input and the weight instead
// makes every convolution, batch norm, ReLU, residual add and pooling after it channels-last too:
// ATen keeps the layout it is given. In inference the weights' copies read parameters alone: the
// plan keeps them between calls (runtime/derived_values.h), and so a weight large against the
// activation its convolution writes gets no copy (passes/kept_weight_copies.h): ATen's convolution
// then lays it out channels-last for that call, as eager's does, unless the convolution epilogue
// folds its batch norm into a per-call copy of its own (passes/convolution_epilogue.h).
#pragma once

#include <limits>

#include "core/graph.h"

namespace zenith::passes {

/// Gives every 2-D convolution on a CUDA device a channels-last copy of its input and weight (one
/// copy per value, however many convolutions read it). Declines (returns false, graph untouched)
/// when a call output has four dimensions (the caller would get another layout than eager's) and,
/// for a graph that will be differentiated (`training`), when a batch norm runs in eval mode
/// (ATen's CUDA backward of it on channels-last tensors needs batch statistics that an eval
/// forward does not make).
/// When it returns true, the strides of the values after the copies are stale: the caller runs the
/// graph and takes every value's strides from the tensors it gets. `cuda_only` false rewrites
/// convolutions on the CPU too, where channels-last is no faster: tests run the rewrite's results
/// there. `kept_fraction`, in inference: a weight with more than this many times the elements of
/// its convolution's result gets no copy (CompileOptions::kept_weight_fraction).
bool convolutions_channels_last(ir::Graph& graph, bool training, bool cuda_only = true,
                                double kept_fraction = std::numeric_limits<double>::infinity());

}  // namespace zenith::passes
