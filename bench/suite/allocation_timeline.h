// The CUDA caching allocator's history (its trace of allocations and frees, in order) replayed:
// when allocated memory peaked, in which call, and which allocations were alive then. No device:
// memory_history.h feeds it the allocator's snapshot, and the tests feed it entries of their own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include <c10/core/CachingDeviceAllocator.h>

namespace zenith::bench {

using c10::CachingDeviceAllocator::TraceEntry;

/// The calls' entries of a trace, with the marks the history made taken out.
struct Timeline {
  std::vector<TraceEntry> entries;
  /// Per call-end mark: how many of `entries` came before it (the call's last entry is at one less).
  std::vector<std::size_t> call_ends;
};

/// `trace` without its marks: an allocation on stream `call_marks` ends a call; allocations on
/// stream `pause_marks` alternately start and end a stretch whose entries are left out (the
/// suite's own work between calls). Every other entry of those streams is left out too.
Timeline timeline_of(const std::vector<TraceEntry>& trace, const void* call_marks, const void* pause_marks);

/// An allocation the trace made and had not freed.
struct Alive {
  std::size_t size = 0;
  std::size_t entry = 0;  // its ALLOC entry's index
};

/// The allocations alive after one entry, by address, and the bytes of blocks older than the trace
/// (allocated before it began) that it freed by then.
struct Moment {
  std::unordered_map<std::size_t, Alive> alive;
  std::int64_t older_freed = 0;
  /// Allocated bytes above the trace's start: what is alive less what older blocks gave back.
  std::int64_t bytes() const;
};

/// The moment after entry `last` of `entries` (after all of them when `last` is past the end). A
/// block counts as allocated from its ALLOC entry to its FREE_COMPLETED one, as the allocator's
/// statistics count it.
Moment moment_after(const std::vector<TraceEntry>& entries, std::size_t last);

/// The index of the entry after which allocated bytes stood highest above the start, among the
/// entries up to `through` (all of them by default); none when they never rose above it.
std::optional<std::size_t> peak_entry(const std::vector<TraceEntry>& entries,
                                      std::size_t through = static_cast<std::size_t>(-1));

/// The call, counted from 1, that entry `index` of `timeline.entries` belongs to.
std::size_t call_of(const Timeline& timeline, std::size_t index);

}  // namespace zenith::bench
