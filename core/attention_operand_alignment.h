// PyTorch's fused attention kernels take their operands' base addresses as 16-byte aligned without
// checking them: ATen picks a kernel by sizes, strides and dtypes only. On an H200 with PyTorch
// 2.11, cuDNN's attention returned values wrong by 1.1 to 1.5 (relative to the largest) for float16
// and bfloat16 operands that start one element off a 16-byte boundary, where the same values
// copied to aligned memory came within 3.3e-4 and 2.5e-3 of a float64 reference; the float32
// memory-efficient kernel read such operands misaligned, a CUDA error that ends the process's CUDA
// context (pytorch/pytorch#183484). Figures: docs/performance.md, "Eager PyTorch's wrong results
// that the kernel's test ran into" (2026-11-30, `bench/attention_kernels.py`).
//
// A plan's attention reads views the model made (a storage offset of one element is enough), so
// the ops below get such operands copied to memory of their own, which the caching allocator
// aligns: their result is then the right one, where eager's is not.
#pragma once

#include <cstddef>
#include <string>

#include <ATen/core/stack.h>

namespace zenith {

/// Whether `op` ("aten::scaled_dot_product_attention", or one of ATen's fused attention kernels
/// and their backwards) is an op whose CUDA operands align_attention_operands must see first.
bool reads_attention_operands_aligned(const std::string& op);

/// Replaces every defined CUDA tensor on `stack` whose data does not start on a 16-byte boundary
/// with a copy of it in fresh memory: the same values, sizes and strides (an expanded mask stays
/// expanded). Returns how many it replaced. Tensors on other devices are left alone: the CPU's
/// kernels handle any address.
std::size_t align_attention_operands(torch::jit::Stack& stack);

/// How many operands align_attention_operands has copied in this process, for tests and reports.
std::size_t attention_operands_aligned();

}  // namespace zenith
