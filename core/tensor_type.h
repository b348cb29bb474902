// TensorType: everything the IR knows about one tensor value.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

namespace zenith::ir {

/// Exact type of a tensor value for one signature: dtype, sizes, strides (in elements), device.
struct TensorType {
  c10::ScalarType dtype = c10::ScalarType::Float;
  std::vector<std::int64_t> sizes;
  std::vector<std::int64_t> strides;
  c10::Device device = c10::Device(c10::kCPU);
  bool requires_grad = false;

  std::int64_t rank() const { return static_cast<std::int64_t>(sizes.size()); }
  std::int64_t numel() const;
  /// Bytes from the first to one past the last element reached through the strides.
  std::int64_t storage_bytes() const;
  /// e.g. "float32[3, 4] strides [4, 1] cpu".
  std::string to_string() const;
  bool operator==(const TensorType& other) const;
  bool operator!=(const TensorType& other) const { return !(*this == other); }
};

/// "float32", "bfloat16", ... (the names of docs/trace-format.md).
std::string dtype_name(c10::ScalarType dtype);
/// Inverse of dtype_name; throws zenith::Error naming the accepted names.
c10::ScalarType dtype_from_name(const std::string& name);

}  // namespace zenith::ir

namespace zenith {

/// The exact type of a tensor: its dtype, sizes, strides, device and requires_grad.
ir::TensorType type_of(const at::Tensor& tensor);

}  // namespace zenith
