#include "core/attention_operand_alignment.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string_view>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "core/log.h"

namespace zenith {
namespace {

constexpr std::uintptr_t kAlignment = 16;

std::atomic<std::size_t> copies{0};

// ATen's fused attention kernels (sm80 and later), forward and backward. The composite
// scaled_dot_product_attention picks one of them; the math backend, which reads any address, is
// left out.
constexpr std::array<std::string_view, 7> kOps = {
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

bool same_view(const at::Tensor& a, const at::Tensor& b) {
  return a.const_data_ptr() == b.const_data_ptr() && a.dtype() == b.dtype() && a.sizes().equals(b.sizes()) &&
         a.strides().equals(b.strides());
}

}  // namespace

bool reads_attention_operands_aligned(const c10::FunctionSchema& schema) {
  if (std::find(kOps.begin(), kOps.end(), std::string_view(schema.name())) == kOps.end()) return false;
  return std::none_of(schema.arguments().begin(), schema.arguments().end(),
                      [](const c10::Argument& argument) { return argument.alias_info() != nullptr; });
}

at::Tensor copy_keeping_layout(const at::Tensor& tensor) {
  std::int64_t last = 0;  // the offset of the last element, from the first
  for (std::int64_t d = 0; d < tensor.dim(); ++d) last += (tensor.size(d) - 1) * tensor.stride(d);
  const auto span = tensor.as_strided({last + 1}, {1});
  return at::empty({last + 1}, tensor.options()).copy_(span).as_strided(tensor.sizes(), tensor.strides());
}

std::size_t align_attention_operands(torch::jit::Stack& stack) {
  // Each operand copied, with its copy: query, key and value are often one tensor (self-attention
  // over a view), copied once. Empty, and so allocating nothing, where every operand is aligned.
  std::vector<std::pair<at::Tensor, at::Tensor>> made;
  for (auto& item : stack) {
    if (!item.isTensor() || !off_boundary(item.toTensor())) continue;
    const auto original = item.toTensor();
    auto found = std::find_if(made.begin(), made.end(), [&](const auto& pair) { return same_view(pair.first, original); });
    if (found == made.end()) found = made.emplace(made.end(), original, copy_keeping_layout(original));
    item = found->second;
  }
  if (made.empty()) return 0;
  copies.fetch_add(made.size(), std::memory_order_relaxed);
  static std::once_flag logged;
  std::call_once(logged, [] {
    log::info("zenith: PyTorch's fused attention was given CUDA operands off 16-byte boundaries; they are copied to "
              "aligned memory first, where its kernels read them right (core/attention_operand_alignment.h)");
  });
  return made.size();
}

std::size_t attention_operands_aligned() { return copies.load(std::memory_order_relaxed); }

}  // namespace zenith
