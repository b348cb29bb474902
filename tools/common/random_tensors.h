// Random tensors of exact IR types: the inputs of a replayed dump and of conformance cases.
#pragma once

#include <string>

#include <ATen/core/Tensor.h>

#include "core/tensor_type.h"

namespace zenith::tools {

/// A tensor with exactly the sizes, strides, dtype and device of `type`, drawn from ATen's global
/// generator (seed it with at::manual_seed): floating point and complex from randn; integers
/// uniformly from [0, 2), so that token ids and indices stay in range for any table; bool uniformly.
/// Overlapping strides (an expanded input) are honoured: the values are drawn for the storage the
/// strides reach, then viewed.
at::Tensor random_tensor(const ir::TensorType& type);

/// Throws zenith::Error naming `what` when `device` cannot be used on this machine.
void require_device(const c10::Device& device, const std::string& what);

}  // namespace zenith::tools
