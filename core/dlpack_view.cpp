#include "core/dlpack_view.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "zenith/error.h"

namespace zenith {

DLDataType to_dlpack_dtype(c10::ScalarType dtype) {
  auto bits = static_cast<std::uint8_t>(c10::elementSize(dtype) * 8);
  switch (dtype) {
    case c10::ScalarType::Float:
    case c10::ScalarType::Double:
    case c10::ScalarType::Half: return {kDLFloat, bits, 1};
    case c10::ScalarType::BFloat16: return {kDLBfloat, bits, 1};
    case c10::ScalarType::Long:
    case c10::ScalarType::Int:
    case c10::ScalarType::Short:
    case c10::ScalarType::Char: return {kDLInt, bits, 1};
    case c10::ScalarType::Byte:
    case c10::ScalarType::UInt16:
    case c10::ScalarType::UInt32:
    case c10::ScalarType::UInt64: return {kDLUInt, bits, 1};
    case c10::ScalarType::Bool: return {ZN_DLPACK_BOOL_CODE, 8, 1};
    case c10::ScalarType::ComplexFloat:
    case c10::ScalarType::ComplexDouble: return {kDLComplex, bits, 1};
    default: throw Error(fmt::format("DLPack: no DLPack type for {}", c10::toString(dtype)));
  }
}

c10::ScalarType from_dlpack_dtype(DLDataType dtype) {
  if (dtype.lanes == 1) {
    switch (dtype.code) {
      case kDLFloat:
        if (dtype.bits == 32) return c10::ScalarType::Float;
        if (dtype.bits == 64) return c10::ScalarType::Double;
        if (dtype.bits == 16) return c10::ScalarType::Half;
        break;
      case kDLBfloat:
        if (dtype.bits == 16) return c10::ScalarType::BFloat16;
        break;
      case kDLInt:
        if (dtype.bits == 64) return c10::ScalarType::Long;
        if (dtype.bits == 32) return c10::ScalarType::Int;
        if (dtype.bits == 16) return c10::ScalarType::Short;
        if (dtype.bits == 8) return c10::ScalarType::Char;
        break;
      case kDLUInt:
        if (dtype.bits == 8) return c10::ScalarType::Byte;
        if (dtype.bits == 16) return c10::ScalarType::UInt16;
        if (dtype.bits == 32) return c10::ScalarType::UInt32;
        if (dtype.bits == 64) return c10::ScalarType::UInt64;
        break;
      case kDLComplex:
        if (dtype.bits == 64) return c10::ScalarType::ComplexFloat;
        if (dtype.bits == 128) return c10::ScalarType::ComplexDouble;
        break;
      case ZN_DLPACK_BOOL_CODE:
        if (dtype.bits == 8) return c10::ScalarType::Bool;
        break;
      default: break;
    }
  }
  throw Error(fmt::format("DLPack: unsupported dtype code {} bits {} lanes {}", dtype.code, dtype.bits, dtype.lanes));
}

DLDevice to_dlpack_device(const c10::Device& device) {
  if (device.is_cpu()) return {kDLCPU, 0};
  if (device.is_cuda()) return {kDLCUDA, device.index() < 0 ? 0 : device.index()};
  throw Error(fmt::format("DLPack: device {} cannot cross the plugin ABI (cpu and cuda only)", device.str()));
}

c10::Device from_dlpack_device(DLDevice device) {
  if (device.device_type == kDLCPU) return c10::Device(c10::kCPU);
  if (device.device_type == kDLCUDA) return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(device.device_id));
  throw Error(fmt::format("DLPack: unsupported device type {}", static_cast<int>(device.device_type)));
}

DLTensor describe_dlpack(const ir::TensorType& type) {
  DLTensor view{};
  view.data = nullptr;
  view.device = to_dlpack_device(type.device);
  view.ndim = static_cast<int>(type.sizes.size());
  view.dtype = to_dlpack_dtype(type.dtype);
  view.shape = const_cast<std::int64_t*>(type.sizes.data());
  view.strides = const_cast<std::int64_t*>(type.strides.data());
  return view;
}

DLTensor borrow_dlpack(const at::Tensor& tensor) {
  DLTensor view{};
  view.data = tensor.numel() == 0 ? nullptr : tensor.data_ptr();
  view.device = to_dlpack_device(tensor.device());
  view.ndim = static_cast<int>(tensor.dim());
  view.dtype = to_dlpack_dtype(tensor.scalar_type());
  // IntArrayRef points into the TensorImpl's own storage of sizes and strides.
  view.shape = const_cast<std::int64_t*>(tensor.sizes().data());
  view.strides = const_cast<std::int64_t*>(tensor.strides().data());
  view.byte_offset = 0;
  return view;
}

at::Tensor wrap_dlpack(const DLTensor& view) {
  auto options = at::TensorOptions().dtype(from_dlpack_dtype(view.dtype)).device(from_dlpack_device(view.device));
  at::IntArrayRef sizes(view.shape, view.ndim);
  if (view.ndim > 0 && view.strides == nullptr) {
    throw Error("DLPack: a tensor without strides crossed the ABI; Zenith always fills them");
  }
  at::IntArrayRef strides(view.strides, view.ndim);
  if (c10::multiply_integers(sizes) == 0) return at::empty_strided(sizes, strides, options);
  auto* data = static_cast<char*>(view.data) + view.byte_offset;
  return at::from_blob(data, sizes, strides, options);
}

namespace {

// A lent tensor and the DLPack header that describes it; the header's shape and strides point
// into the tensor's own metadata, which lives as long as this does.
struct Lent {
  at::Tensor tensor;
  DLManagedTensor managed{};
};

void release_lent(DLManagedTensor* managed) { delete static_cast<Lent*>(managed->manager_ctx); }

}  // namespace

DLManagedTensor* lend_dlpack(at::Tensor tensor) {
  auto* lent = new Lent{std::move(tensor)};
  lent->managed.dl_tensor = borrow_dlpack(lent->tensor);
  lent->managed.manager_ctx = lent;
  lent->managed.deleter = release_lent;
  return &lent->managed;
}

void release_dlpack(std::vector<DLManagedTensor*>& handed) {
  for (auto*& managed : handed) {
    if (managed != nullptr && managed->deleter != nullptr) managed->deleter(managed);
    managed = nullptr;
  }
}

at::Tensor adopt_dlpack(DLManagedTensor* managed) {
  auto release = [managed](void*) {
    if (managed->deleter != nullptr) managed->deleter(managed);
  };
  const auto& view = managed->dl_tensor;
  at::TensorOptions options;
  try {
    options = at::TensorOptions().dtype(from_dlpack_dtype(view.dtype)).device(from_dlpack_device(view.device));
    if (view.ndim > 0 && view.strides == nullptr) throw Error("DLPack: a handed-back tensor has no strides");
  } catch (...) {
    release(nullptr);
    throw;
  }
  at::IntArrayRef sizes(view.shape, view.ndim);
  at::IntArrayRef strides(view.strides, view.ndim);
  if (c10::multiply_integers(sizes) == 0) {
    auto empty = at::empty_strided(sizes, strides, options);
    release(nullptr);
    return empty;
  }
  auto* data = static_cast<char*>(view.data) + view.byte_offset;
  return at::from_blob(data, sizes, strides, release, options);
}

}  // namespace zenith
