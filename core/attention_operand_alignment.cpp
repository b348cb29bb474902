#include "core/attention_operand_alignment.h"

#include <array>
#include <atomic>
#include <cstdint>

#include <ATen/ATen.h>

namespace zenith {
namespace {

constexpr std::uintptr_t kAlignment = 16;

std::atomic<std::size_t> copies{0};

// ATen's fused attention kernels (sm80 and later), forward and backward. The composite
// scaled_dot_product_attention picks one of them; the math backend, which reads any address, is
// left out.
constexpr std::array<const char*, 7> kOps = {
    "aten::scaled_dot_product_attention",
    "aten::_scaled_dot_product_cudnn_attention",
    "aten::_scaled_dot_product_cudnn_attention_backward",
    "aten::_scaled_dot_product_efficient_attention",
    "aten::_scaled_dot_product_efficient_attention_backward",
    "aten::_scaled_dot_product_flash_attention",
    "aten::_scaled_dot_product_flash_attention_backward",
};

bool off_boundary(const at::Tensor& tensor) {
  return tensor.defined() && tensor.is_cuda() && tensor.numel() > 0 &&
         reinterpret_cast<std::uintptr_t>(tensor.const_data_ptr()) % kAlignment != 0;
}

// `tensor`'s elements in fresh memory, laid out as they were: the bytes from its first element to
// its last, viewed with its sizes and strides. clone() would make a tensor that is not dense
// contiguous: an expanded mask (stride 0) would be materialized whole, and a bias's padded rows
// would lose the padding that the memory-efficient kernel checks for.
at::Tensor aligned_copy(const at::Tensor& tensor) {
  std::int64_t last = 0;  // the offset of the last element, from the first
  for (std::int64_t d = 0; d < tensor.dim(); ++d) last += (tensor.size(d) - 1) * tensor.stride(d);
  auto span = tensor.as_strided({last + 1}, {1});
  return at::empty({last + 1}, tensor.options()).copy_(span).as_strided(tensor.sizes(), tensor.strides());
}

}  // namespace

bool reads_attention_operands_aligned(const std::string& op) {
  for (const char* name : kOps) {
    if (op == name) return true;
  }
  return false;
}

std::size_t align_attention_operands(torch::jit::Stack& stack) {
  std::size_t copied = 0;
  for (auto& item : stack) {
    if (!item.isTensor() || !off_boundary(item.toTensor())) continue;
    item = aligned_copy(item.toTensor());
    ++copied;
  }
  copies += copied;
  return copied;
}

std::size_t attention_operands_aligned() { return copies.load(); }

}  // namespace zenith
