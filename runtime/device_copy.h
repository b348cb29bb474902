// Copies of a CUDA graph's inputs in and outputs out at a replay where the graph's own copy nodes
// (graph_copy_nodes.h) do not, and the layout check both use: each one cudaMemcpyAsync on the
// current stream where both tensors lay the same elements out densely (the usual case: the
// graph's buffers and outputs are made with the strides of the tensors they stand for). ATen's
// copy_ issues the same device-to-device memcpy for such tensors, but only after its dispatch and
// TensorIterator setup, host work a graphed call pays for every input and output: with them
// (2026-11-30, H200, bench_call_overhead's host time until a call returns, programmatic launch on
// and off) BERT-base b1 float32 took 39 us against 48 to 54 through ATen, ResNet-50 33 to 34
// against 38 to 40. Anything else goes through ATen.
#pragma once

#include <cstdint>

#include <ATen/ATen.h>

namespace zenith {

/// The bytes of `tensor`'s elements: what a memcpy of a plain_dense tensor moves.
std::int64_t byte_count(const at::Tensor& tensor);

/// Whether `tensor` is a strided CUDA tensor whose bytes are its values: not a ZeroTensor (no
/// memory behind it), no lazy conjugate or negation, dense and non-overlapping.
bool plain_dense(const at::Tensor& tensor);

/// Whether `destination` and `source` are strided CUDA tensors with data on one device, of one
/// dtype and sizes, with equal strides wherever a size is not 1, neither overlapping itself nor
/// leaving gaps, with no conjugate or negative bit, in memory that does not overlap: each then
/// holds its elements in the same order in the same number of bytes from its data pointer.
bool same_dense_layout(const at::Tensor& destination, const at::Tensor& source);

/// Writes `source`'s values into `destination` on the current stream: one memcpy where
/// same_dense_layout holds, else `destination.copy_(source)`.
void copy_into(at::Tensor& destination, const at::Tensor& source);

/// A copy of `source` in new memory with its strides, as `source.clone(at::MemoryFormat::Preserve)`
/// makes it, written by one memcpy on the current stream where `source` is a dense CUDA tensor.
at::Tensor copy_of(const at::Tensor& source);

}  // namespace zenith
