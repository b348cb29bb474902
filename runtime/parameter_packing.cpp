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

// Sizes and strides of each piece, copied: set_ rewrites the ones it would read.
struct Shape {
  std::vector<std::int64_t> sizes, strides;
};

std::vector<Shape> shapes_of(const std::vector<at::Tensor>& pieces) {
  std::vector<Shape> shapes;
  for (const auto& piece : pieces) shapes.push_back({piece.sizes().vec(), piece.strides().vec()});
  return shapes;
}

// Each piece becomes a view of its rows of `block`: the tensor itself, not a copy of it, so that
// every holder of the parameter sees it moved.
void point_into(const std::vector<at::Tensor>& pieces, const std::vector<Shape>& shapes, const at::Tensor& block) {
  std::int64_t offset = 0;
  for (std::size_t k = 0; k < pieces.size(); ++k) {
    pieces[k].set_(block.storage(), offset, shapes[k].sizes, shapes[k].strides);
    offset += pieces[k].numel();
  }
}

// Waits for what was queued on `device`'s current stream (nothing to wait for on the CPU).
void wait_for_copies(const c10::Device& device) {
  if (device.is_cpu()) return;
  c10::impl::VirtualGuardImpl guard(device.type());
  guard.getStream(device).synchronize();
}

// Copies `sources` into `block` one after another, then waits for the copies: they finish before
// the old memory goes back to the allocator, and before a call on another stream reads the block.
void fill(const at::Tensor& block, const std::vector<at::Tensor>& sources) {
  std::int64_t row = 0;
  for (const auto& source : sources) {
    block.narrow(0, row, source.size(0)).copy_(source);
    row += source.size(0);
  }
  wait_for_copies(block.device());
}

// In host memory the block is made while the pieces still hold theirs.
std::int64_t pack_in_place(const std::vector<at::Tensor>& pieces) {
  at::NoGradGuard no_grad;  // as in pack_through_host
  const auto shapes = shapes_of(pieces);
  auto block = at::empty(concatenated_sizes(pieces), pieces.front().options());
  fill(block, pieces);
  point_into(pieces, shapes, block);
  return static_cast<std::int64_t>(block.nbytes());
}

// The pieces back where they were before pack_through_host moved them out: memory of their own,
// their values from `staged`. Failing that, the module has lost those parameters, and says so.
void restore(const std::vector<at::Tensor>& pieces, const std::vector<Shape>& shapes,
             const std::vector<at::Tensor>& staged, const at::TensorOptions& options, const BlockAllocator& allocate) {
  try {
    for (std::size_t k = 0; k < pieces.size(); ++k) {
      auto own = allocate(shapes[k].sizes, options);
      own.copy_(staged[k]);
      pieces[k].set_(own.storage(), 0, shapes[k].sizes, shapes[k].strides);
    }
    wait_for_copies(options.device());
  } catch (const std::exception& error) {
    throw PackedParametersLost(fmt::format(
        "packing moved {} parameters' values to the host and could give them neither their block nor memory of "
        "their own again ({}); those parameters are empty now and the module cannot run. Where device memory is "
        "this tight, compile with CompileOptions::pack_parameters off (ZENITH_PACK_PARAMETERS=0)",
        pieces.size(), error.what()));
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

// On a device the pieces go through host memory, and their device memory is freed before the block
// is allocated: packing needs the block's bytes once, not twice. Made next to the old pieces, a
// TinyLlama-sized decoder's gate and up weights (44 MB) were held twice during its first call, the
// highest its memory went in a whole generation (docs/performance.md).
std::int64_t pack_through_host(const std::vector<at::Tensor>& pieces, const BlockAllocator& allocate) {
  // Parameters require gradients; moving them is not a step autograd records.
  at::NoGradGuard no_grad;
  // Read before the pieces let their memory go: set_() leaves them empty until they point into the block.
  const auto shapes = shapes_of(pieces);
  const auto block_sizes = concatenated_sizes(pieces);
  const auto options = pieces.front().options();
  const bool device = !options.device().is_cpu();
  std::vector<at::Tensor> staged;
  for (const auto& piece : pieces) {
    staged.push_back(at::empty(piece.sizes(), options.device(at::kCPU).pinned_memory(device)));
    staged.back().copy_(piece);  // a copy to the host waits for the device
  }
  for (const auto& piece : pieces) piece.set_();  // the only holder of its memory (packing_refusal)
  at::Tensor block;
  try {
    block = allocate(block_sizes, options);
    fill(block, staged);
  } catch (...) {
    restore(pieces, shapes, staged, options, allocate);
    throw;
  }
  point_into(pieces, shapes, block);
  hand_back_cached_memory(block.device());
  return static_cast<std::int64_t>(block.nbytes());
}

std::int64_t pack_into_one_block(const std::vector<at::Tensor>& pieces) {
  const auto& first = pieces.front();
  if (first.device().is_cpu()) return pack_in_place(pieces);
  return pack_through_host(pieces, [](at::IntArrayRef sizes, const at::TensorOptions& options) {
    return at::empty(sizes, options);
  });
}

}  // namespace zenith
