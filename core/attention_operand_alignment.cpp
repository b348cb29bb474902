#include "core/attention_operand_alignment.h"

#include <array>
#include <cstdint>

#include <ATen/ATen.h>

namespace zenith {
namespace {

constexpr std::uintptr_t kAlignment = 16;

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
    item = item.toTensor().clone();
    ++copied;
  }
  return copied;
}

}  // namespace zenith
