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
// aligns. Only base addresses are checked. Strides are part of what cuDNN's graph and the
// memory-efficient kernel's checks are given before they run, so a stride they cannot take should
// be refused there, loudly, where an address is seen only as the kernel reads it (reasoned, not
// read in their code nor measured). Not covered: a signature's first call and any call that runs
// eagerly are eager's own kernels on the operands as they are.
#pragma once

#include <cstddef>

#include <ATen/core/Tensor.h>
#include <ATen/core/function_schema.h>
#include <ATen/core/stack.h>

namespace zenith {

/// Whether align_attention_operands must see the arguments of `schema`'s op first: it is
/// "aten::scaled_dot_product_attention" or one of ATen's fused attention kernels or their
/// backwards, and none of its arguments is written or aliased by its results (an operand replaced
/// by a copy would take such a write or alias away from the caller's tensor).
bool reads_attention_operands_aligned(const c10::FunctionSchema& schema);

/// Replaces every defined CUDA tensor on `stack` whose data does not start on a 16-byte boundary
/// with copy_keeping_layout's copy of it; a tensor that appears more than once (the same data,
/// sizes and strides) is copied once. Returns how many copies it made. Tensors on other devices
/// are left alone: the CPU's kernels handle any address.
std::size_t align_attention_operands(torch::jit::Stack& stack);

/// `tensor`'s elements in fresh memory, which the caching allocator aligns, with `tensor`'s sizes
/// and strides: the bytes from its first element to its last, copied. Unlike clone(), which lays
/// out a dense tensor, an expanded tensor (stride 0) stays one row and padded rows keep their
/// padding (the memory-efficient kernel checks a bias's row stride). `tensor` has elements.
at::Tensor copy_keeping_layout(const at::Tensor& tensor);

/// How many copies align_attention_operands has made in this process, for tests and reports.
std::size_t attention_operands_aligned();

}  // namespace zenith
