// How the suite decides that a mode computes what eager computes: the largest absolute difference
// over all outputs, relative to the largest eager magnitude, within a tolerance per dtype that
// allows for a different order of floating-point operations (fused kernels, TF32 convolutions,
// other matmul algorithms) and nothing more.
#pragma once

#include <string>

#include <c10/core/ScalarType.h>

#include "modes.h"

namespace zenith::bench {

/// max |got - expected| / max |expected| over every output; throws when counts or shapes differ.
double max_relative_error(const Tensors& got, const Tensors& expected);

/// The largest relative error accepted for outputs of `dtype`.
double tolerance(c10::ScalarType dtype);

/// The relative error of `got`; throws a message naming `what` when it exceeds tolerance(dtype).
double check_close(const Tensors& got, const Tensors& expected, c10::ScalarType dtype, const std::string& what);

}  // namespace zenith::bench
