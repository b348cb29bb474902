#include "core/tensor_type.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>
#include <utility>

#include "zenith/error.h"

namespace zenith::ir {
namespace {

const std::array<std::pair<c10::ScalarType, const char*>, 15> kDtypeNames = {{
    {c10::ScalarType::Float, "float32"},
    {c10::ScalarType::Double, "float64"},
    {c10::ScalarType::Half, "float16"},
    {c10::ScalarType::BFloat16, "bfloat16"},
    {c10::ScalarType::Long, "int64"},
    {c10::ScalarType::Int, "int32"},
    {c10::ScalarType::Short, "int16"},
    {c10::ScalarType::Char, "int8"},
    {c10::ScalarType::Byte, "uint8"},
    {c10::ScalarType::UInt16, "uint16"},
    {c10::ScalarType::UInt32, "uint32"},
    {c10::ScalarType::UInt64, "uint64"},  // the fused attention kernels' random-number seed and offset
    {c10::ScalarType::Bool, "bool"},
    {c10::ScalarType::ComplexFloat, "complex64"},
    {c10::ScalarType::ComplexDouble, "complex128"},
}};

}  // namespace

std::int64_t TensorType::numel() const {
  std::int64_t n = 1;
  for (auto size : sizes) n *= size;
  return n;
}

std::int64_t TensorType::storage_bytes() const {
  if (numel() == 0) return 0;
  std::int64_t last = 0;
  for (std::size_t d = 0; d < sizes.size(); ++d) last += (sizes[d] - 1) * strides[d];
  return (last + 1) * static_cast<std::int64_t>(c10::elementSize(dtype));
}

std::string TensorType::to_string() const {
  return fmt::format("{}[{}] strides [{}] {}", dtype_name(dtype), fmt::join(sizes, ", "), fmt::join(strides, ", "),
                     device.str());
}

bool TensorType::operator==(const TensorType& other) const {
  return dtype == other.dtype && sizes == other.sizes && strides == other.strides && device == other.device &&
         requires_grad == other.requires_grad;
}

std::string dtype_name(c10::ScalarType dtype) {
  for (const auto& [type, name] : kDtypeNames) {
    if (type == dtype) return name;
  }
  return std::string("unsupported:") + c10::toString(dtype);
}

c10::ScalarType dtype_from_name(const std::string& name) {
  std::string known;
  for (const auto& [type, text] : kDtypeNames) {
    if (name == text) return type;
    known += known.empty() ? text : std::string(", ") + text;
  }
  throw Error::mismatch("dtype", "one of " + known, "'" + name + "'");
}

}  // namespace zenith::ir

namespace zenith {

ir::TensorType type_of(const at::Tensor& tensor) {
  ir::TensorType type;
  type.dtype = tensor.scalar_type();
  type.sizes = tensor.sizes().vec();
  type.strides = tensor.strides().vec();
  type.device = tensor.device();
  type.requires_grad = tensor.requires_grad();
  return type;
}

}  // namespace zenith
