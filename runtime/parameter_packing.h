// Parameters packed into the concatenation a plan keeps of them. The sibling-products rewrite
// (passes/sibling_products.h) makes one product over `cat([Wq, Wk, Wv])`, and the plan keeps that
// concatenation between calls (runtime/derived_values.h): the weights' memory once more, 1.24 GB
// for a TinyLlama-sized decoder. Packing moves the parameters themselves into one block, one after
// another, each becoming a view of its rows of it (same values, sizes and strides; another
// address). The concatenation of pieces that already lie one after another is a view of the
// block, not a copy, so the kept value costs no memory, and an update of a parameter in place is
// an update of the concatenation.
//
// Only a parameter that nothing else shares is moved: a tensor whose storage another tensor also
// holds (a view of it, a detached alias, weights tied through another tensor) keeps its memory,
// and the plan keeps a copy as before. Packing runs under the engine's lock while no other call of
// the module is in flight (runtime/engine.h).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "zenith/error.h"

namespace zenith {

/// Thrown by pack_into_one_block when packing on a device moved the pieces' values to the host,
/// could not allocate the block, and could not give the pieces device memory of their own again
/// either: those parameters are empty now, and the module cannot run. Not a failure to pack that
/// the plan can absorb by keeping its copy.
class PackedParametersLost : public Error {
 public:
  using Error::Error;
};

/// The concatenation of `pieces` along dimension 0 as a view, when they already lie one after
/// another in one storage (each contiguous, of one dtype and device, the same sizes after the
/// first dimension); else an undefined tensor.
at::Tensor adjacent_concatenation(const std::vector<at::Tensor>& pieces);

/// Why `pieces` cannot be packed into one block, or empty: fewer than two, undefined, not distinct,
/// of different dtypes, devices or trailing sizes, not contiguous, a view, an inference tensor, in
/// a storage another tensor shares or that holds more than it, or a piece would start at a byte
/// offset that is not a multiple of 256 (the alignment of a fresh allocation, which kernels may
/// rely on).
std::string packing_refusal(const std::vector<at::Tensor>& pieces);

/// Packs `pieces` (packing_refusal must have said yes): allocates one block, copies them into it
/// one after another and makes each a view of its part, then hands the device memory the caching
/// allocator keeps unused back to the device (the pieces' old memory among it, which no later block
/// fits). Returns the bytes of the block, which the pieces' old storages held before and no longer
/// hold. On a device the pieces go through host memory (pack_through_host), so packing never holds
/// them twice; in host memory the block is made beside them, and a failure to allocate it moves
/// nothing.
std::int64_t pack_into_one_block(const std::vector<at::Tensor>& pieces);

/// Makes a block (or, when putting pieces back, a piece's own memory) of `sizes`, contiguous.
using BlockAllocator = std::function<at::Tensor(at::IntArrayRef sizes, const at::TensorOptions& options)>;

/// pack_into_one_block's way on a device, open to the CPU tests with their own `allocate`: the
/// pieces' values are staged in host memory (pinned for a device), the pieces let their memory go,
/// then `allocate` makes the block and the values are copied into it. If making or filling the
/// block fails, each piece gets memory of its own from `allocate` and its values back, and the
/// error goes up; if even that fails, PackedParametersLost says so.
std::int64_t pack_through_host(const std::vector<at::Tensor>& pieces, const BlockAllocator& allocate);

}  // namespace zenith
