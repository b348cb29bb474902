// Which weight copies an inference plan keeps (CompileOptions::kept_weight_fraction). A
// convolution's weight with its batch norm folded in (passes/convolution_epilogue.h), or in the
// channels-last layout (passes/channels_last_convolutions.h), is a copy the plan holds between
// calls (runtime/derived_values.h): memory eager never needs. The copy pays where the activation
// the convolution writes is large against its weight (the fused epilogue saves a pass over that
// activation), and costs most where it is small: ResNet-50's late layers hold most of its weights
// and write the smallest activations. Kept where the weight has at most a tenth of the elements of
// the activation, ResNet-50's copies at batch 1 are 0.5 MB in float32 instead of 79 MB, and 19 MB
// at batch 64 (docs/performance.md).
#pragma once

#include "core/tensor_type.h"

namespace zenith::passes {

/// Whether a plan keeps a copy of `weight` for the convolution writing `output`: the weight has at
/// most `fraction` times as many elements as the output. Infinity keeps every copy.
bool weight_copy_kept(const ir::TensorType& weight, const ir::TensorType& output, double fraction);

}  // namespace zenith::passes
