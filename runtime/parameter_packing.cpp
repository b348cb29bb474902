#include "runtime/parameter_packing.h"

#include <set>

#include <fmt/format.h>

#include <ATen/ATen.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/strides.h>

#include "core/log.h"
#include "runtime/graph_registration_lock.h"

namespace zenith {
namespace {

// Alignment of a fresh allocation on CUDA: kernels may load a piece in 16-byte vectors, and
// cuBLASLt's fastest algorithms want at least that.
constexpr std::int64_t kPieceAlignment = 256;

bool same_trailing_sizes(const at::Tensor& a, const at::Tensor& b) {
  return a.dim() == b.dim() && a.dim() >= 1 && a.sizes().slice(1) == b.sizes().slice(1);
}

std::vector<std::int64_t> concatenated_sizes(const std::vector<at::Tensor>& pieces) {
  auto sizes = pieces.front().sizes().vec();
  sizes[0] = 0;
  for (const auto& piece : pieces) sizes[0] += piece.size(0);
  return sizes;
}

// A tensor over `storage` from element `offset` with `sizes`, contiguous: an identity of its own
// over memory another tensor owns.
at::Tensor view_of(const at::Tensor& like, const c10::Storage& storage, std::int64_t offset,
                   const std::vector<std::int64_t>& sizes) {
  auto view = at::empty({0}, like.options());
  view.set_(storage, offset, sizes, c10::contiguous_strides(sizes));
  return view;
}

// The pieces' old memory went back to the device's caching allocator, which keeps it for later
// allocations that fit in it. The next concatenation's block is larger than each of its pieces and
// fits none of it, so a decoder's packing left its projections' weights reserved twice, about
// 1 GB on an H200 for a TinyLlama-sized one that no tensor held. Handing the cached memory back to
// the device after each block lets the next block take it: what packing reserves at once is one
// block. The allocator's cache of the whole process goes (a one-off, at a signature's first call),
// under the graph registration lock: a free while one of Zenith's captures runs on another thread
// would end that capture. The pieces have moved by then, so a failure here (a device type whose
// allocator caches nothing) only says so: packing happened.
void hand_back_cached_memory(const c10::Device& device) {
  if (device.is_cpu()) return;
  try {
    const auto lock = lock_graph_registration();
    c10::getDeviceAllocator(device.type())->emptyCache();
  } catch (const std::exception& error) {
    const std::string what = error.what();
    log::info("packed parameters' old memory on {} stays with its allocator: {}", device.str(),
              what.substr(0, what.find('\n')));
  }
}

}  // namespace

at::Tensor adjacent_concatenation(const std::vector<at::Tensor>& pieces) {
  if (pieces.size() < 2) return {};
  const auto& first = pieces.front();
  if (!first.defined() || !first.has_storage()) return {};
  std::int64_t next = first.storage_offset();
  for (const auto& piece : pieces) {
    if (!piece.defined() || !piece.has_storage() || piece.scalar_type() != first.scalar_type() ||
        piece.device() != first.device() || !same_trailing_sizes(piece, first) || !piece.is_contiguous() ||
        !piece.storage().is_alias_of(first.storage()) || piece.storage_offset() != next) {
      return {};
    }
    next += piece.numel();
  }
  return view_of(first, first.storage(), first.storage_offset(), concatenated_sizes(pieces));
}

std::string packing_refusal(const std::vector<at::Tensor>& pieces) {
  if (pieces.size() < 2) return "fewer than two tensors";
  std::set<const void*> seen;
  std::int64_t offset = 0;  // bytes into the block
  const auto& first = pieces.front();
  for (std::size_t k = 0; k < pieces.size(); ++k) {
    const auto& piece = pieces[k];
    auto no = [&](const std::string& why) { return fmt::format("tensor {} of {} {}", k + 1, pieces.size(), why); };
    if (!piece.defined() || !piece.has_storage()) return no("has no memory");
    if (!seen.insert(piece.unsafeGetTensorImpl()).second) return no("appears twice");
    if (piece.scalar_type() != first.scalar_type() || piece.device() != first.device()) {
      return no(fmt::format("is {} on {}, the first {} on {}", c10::toString(piece.scalar_type()), piece.device().str(),
                            c10::toString(first.scalar_type()), first.device().str()));
    }
    if (!same_trailing_sizes(piece, first)) return no("has other sizes after the first dimension");
    if (piece.numel() == 0) return no("is empty");
    if (!piece.is_contiguous()) return no("is not contiguous");
    if (piece.is_view()) return no("is a view of another tensor");
    if (piece.is_inference()) return no("is an inference tensor (made under InferenceMode), which stays where it is");
    const auto& storage = piece.storage();
    if (piece.storage_offset() != 0 || storage.nbytes() != piece.nbytes()) {
      return no("lies in a storage that holds more than it");
    }
    if (storage.use_count() != 1) return no("shares its memory with another tensor");
    if (offset % kPieceAlignment != 0) {
      return no(fmt::format("would start at byte {} of the block, not a multiple of {}", offset, kPieceAlignment));
    }
    offset += static_cast<std::int64_t>(piece.nbytes());
  }
  return "";
}

std::int64_t pack_into_one_block(const std::vector<at::Tensor>& pieces) {
  // Parameters require gradients; moving them is not a step autograd records.
  at::NoGradGuard no_grad;
  const auto& first = pieces.front();
  auto block = at::empty(concatenated_sizes(pieces), first.options());
  std::int64_t row = 0;
  for (const auto& piece : pieces) {
    block.narrow(0, row, piece.size(0)).copy_(piece);
    row += piece.size(0);
  }
  // The copies finish before the old memory goes back to the allocator, and before a call on
  // another stream reads the block.
  if (!first.device().is_cpu()) {
    c10::impl::VirtualGuardImpl guard(first.device().type());
    guard.getStream(first.device()).synchronize();
  }
  std::int64_t offset = 0;
  for (const auto& piece : pieces) {
    // The tensor itself, not a copy of it: every holder of the parameter sees it moved.
    // (Sizes and strides copied first: set_ rewrites the ones it would read.)
    const auto sizes = piece.sizes().vec(), strides = piece.strides().vec();
    piece.set_(block.storage(), offset, sizes, strides);
    offset += piece.numel();
  }
  hand_back_cached_memory(first.device());
  return static_cast<std::int64_t>(block.nbytes());
}

}  // namespace zenith
