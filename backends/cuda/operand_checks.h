// What the code generators ask of a group and of each tensor a kernel reads or writes, and how the
// kernels over four dimensions (attention, blind rows, pooling) receive a tensor.
#pragma once

#include <cstdint>
#include <vector>

#include <dlpack/dlpack.h>

#include "core/graph.h"

namespace zenith::cuda {

/// Throws Unsupported unless the group has nodes and outputs, writes no input in place and keeps
/// every tensor on one device.
void check_group_shape(const ir::Graph& group);

/// Throws Unsupported unless value `id` is on a CUDA device in a dtype kernels can load and store.
void check_operand(const ir::Graph& group, int id);

/// Whether `type` has exactly `shape` and is row-major contiguous (size-1 dimensions aside).
bool is_contiguous_over(const ir::TensorType& type, const std::vector<std::int64_t>& shape);

/// The most elements a kernel with 32-bit offsets serves: 2^24 below 2^31, because grid-stride
/// counters run past the last element before they test it.
constexpr std::int64_t kMax32BitExtent = std::int64_t{2147483647} - (std::int64_t{1} << 24);

/// Whether offsets need 64 bits: the iteration space or some operand's memory span (in elements)
/// exceeds kMax32BitExtent.
bool needs_64bit_offsets(const ir::Graph& group, const std::vector<int>& operand_ids,
                         const std::vector<std::int64_t>& shape);

/// Where `t`'s first element lies (data plus byte_offset), as a kernel argument word.
std::int64_t address_word(const DLTensor& t);

/// Appends the address of `t` and its four strides in elements over four dimensions
/// (right-aligned; 0 where a size is 1 or the dimension is missing, so that it broadcasts) to
/// `words`, as the attention, blind-rows and pooling kernels read an operand.
void pack_four_dimensional_operand(const DLTensor& t, std::vector<std::int64_t>& words);

}  // namespace zenith::cuda
