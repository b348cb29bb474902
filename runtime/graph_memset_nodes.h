// A captured CUDA graph's memset nodes, rewritten as memcpy nodes that copy the same bytes from a
// buffer holding them. A graph's launch costs the host about 1.2 us per memset node on the H200
// (driver 580), and next to nothing per memcpy node or kernel node. cuDNN's attention records a
// 4-byte memset before each of its kernels, so a BERT-base graph in float16 holds 12 of them.
// Plain PyTorch, a graph of 12 cuDNN attentions [1, 12, 128, 64]: 17.7 us of host time for a
// replay as captured, 3.1 with its memsets as memcpy nodes, and the device's time per replay
// went from 79-81 us to 67-73 (docs/performance.md, 2026-11-30).
// Built with LibTorch's CUDA part only, as runtime/plan_graph.cpp, its user.
#pragma once

#include <cstddef>

#include <c10/core/Device.h>
#include <cuda_runtime_api.h>

namespace zenith {

/// Memsets of more bytes than this stay memset nodes. Their pattern would need a buffer as large,
/// and a memset that large takes long enough on the device that the host's extra microsecond does
/// not matter.
constexpr std::size_t kMaxRewrittenMemsetBytes = 64 * 1024;

/// What memsets_as_copies did.
struct MemsetRewrite {
  std::size_t rewritten = 0;  ///< memset nodes replaced by memcpy nodes
  std::size_t kept = 0;       ///< memset nodes left as they were (too large, or too many patterns)
};

/// Replaces each memset node of `graph` with a memcpy node. `graph` was captured on `device` and
/// is not yet instantiated. A memset is replaced only if it sets at most kMaxRewrittenMemsetBytes
/// of `device`'s own memory (host memory mapped for the device, managed memory and other devices'
/// are left to their memsets).
/// The memcpy node has the memset's dependencies and dependents, with their edge data, and copies
/// the same bytes into the same places. It reads them from a buffer on `device` that holds the
/// memset's pattern. That buffer is made at the pattern's first use in the process and is never
/// freed, because executable graphs made from `graph` read it at every launch.
///
/// Throws std::runtime_error naming CUDA's error where the graph cannot be read or edited, or a
/// buffer cannot be made; the memsets rewritten before stay rewritten. A memset node is destroyed
/// only once its memcpy node and every edge of that node are in place, and a memcpy node whose
/// dependents could not be given to it is destroyed again. So whatever call fails, the graph still
/// writes the same bytes in the same order; a memset may just be doubled by its copy.
MemsetRewrite memsets_as_copies(cudaGraph_t graph, c10::DeviceIndex device);

}  // namespace zenith
