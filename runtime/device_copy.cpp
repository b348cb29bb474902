#include "runtime/device_copy.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

namespace zenith {

bool same_dense_layout(const at::Tensor& destination, const at::Tensor& source) {
  if (!destination.defined() || !source.defined()) return false;
  if (!destination.is_cuda() || !source.is_cuda() || destination.device() != source.device()) return false;
  if (destination.scalar_type() != source.scalar_type()) return false;
  if (destination.sizes() != source.sizes() || destination.strides() != source.strides()) return false;
  // A conjugate or negative view's bytes are not its values; copy_ resolves the bit.
  if (destination.is_conj() || source.is_conj() || destination.is_neg() || source.is_neg()) return false;
  // Dense and non-overlapping, with PyTorch's strides never negative, the elements fill the
  // numel * itemsize bytes from the data pointer in an order the equal strides make equal.
  return destination.is_non_overlapping_and_dense() && source.is_non_overlapping_and_dense();
}

namespace {

void copy_bytes(at::Tensor& destination, const at::Tensor& source) {
  const auto bytes = source.numel() * static_cast<std::int64_t>(source.element_size());
  if (bytes == 0) return;
  C10_CUDA_CHECK(cudaMemcpyAsync(destination.data_ptr(), source.data_ptr(), static_cast<std::size_t>(bytes),
                                 cudaMemcpyDeviceToDevice, at::cuda::getCurrentCUDAStream(source.device().index())));
}

}  // namespace

void copy_into(at::Tensor& destination, const at::Tensor& source) {
  if (same_dense_layout(destination, source)) {
    copy_bytes(destination, source);
  } else {
    destination.copy_(source);
  }
}

at::Tensor copy_of(const at::Tensor& source) {
  if (!source.defined() || !source.is_cuda() || !source.is_non_overlapping_and_dense() || source.is_conj() ||
      source.is_neg()) {
    return source.clone(at::MemoryFormat::Preserve);
  }
  auto copy = at::empty_strided(source.sizes(), source.strides(), source.options());
  copy_bytes(copy, source);
  return copy;
}

}  // namespace zenith
