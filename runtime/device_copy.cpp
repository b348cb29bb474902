#include "runtime/device_copy.h"

#include <cstdint>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

namespace zenith {
namespace {

// Strides matter only where a size is not 1: a size-1 dimension's stride moves no element.
bool same_strides(const at::Tensor& a, const at::Tensor& b) {
  const auto sizes = a.sizes();
  for (std::size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] != 1 && a.stride(static_cast<std::int64_t>(d)) != b.stride(static_cast<std::int64_t>(d))) return false;
  }
  return true;
}

bool overlap(const at::Tensor& a, const at::Tensor& b) {
  const auto* a_begin = static_cast<const char*>(a.const_data_ptr());
  const auto* b_begin = static_cast<const char*>(b.const_data_ptr());
  return a_begin < b_begin + byte_count(b) && b_begin < a_begin + byte_count(a);
}

void copy_bytes(at::Tensor& destination, const at::Tensor& source) {
  const auto bytes = byte_count(source);
  if (bytes == 0) return;
  C10_CUDA_CHECK(cudaMemcpyAsync(destination.data_ptr(), source.const_data_ptr(), static_cast<std::size_t>(bytes),
                                 cudaMemcpyDeviceToDevice, at::cuda::getCurrentCUDAStream(source.device().index())));
}

}  // namespace

std::int64_t byte_count(const at::Tensor& tensor) {
  return tensor.numel() * static_cast<std::int64_t>(tensor.element_size());
}

bool plain_dense(const at::Tensor& tensor) {
  return tensor.defined() && tensor.is_cuda() && tensor.layout() == at::kStrided && !tensor._is_zerotensor() &&
         !tensor.is_conj() && !tensor.is_neg() && tensor.is_non_overlapping_and_dense();
}

bool same_dense_layout(const at::Tensor& destination, const at::Tensor& source) {
  if (!plain_dense(destination) || !plain_dense(source)) return false;
  if (destination.device() != source.device() || destination.scalar_type() != source.scalar_type()) return false;
  if (destination.sizes() != source.sizes() || !same_strides(destination, source)) return false;
  // Dense, with PyTorch's strides never negative, each tensor's elements fill numel * itemsize
  // bytes from its data pointer, in an order the equal strides make equal.
  return destination.numel() == 0 || !overlap(destination, source);
}

void copy_into(at::Tensor& destination, const at::Tensor& source) {
  if (same_dense_layout(destination, source)) {
    copy_bytes(destination, source);
  } else {
    destination.copy_(source);
  }
}

at::Tensor copy_of(const at::Tensor& source) {
  if (!plain_dense(source)) return source.clone(at::MemoryFormat::Preserve);
  auto copy = at::empty_strided(source.sizes(), source.strides(), source.options());
  copy_bytes(copy, source);
  return copy;
}

}  // namespace zenith
