// The CUDA caching allocator's history (its trace of allocations and frees, in order) replayed:
// when allocated or reserved memory peaked, in which call, and which allocations and segments were
// alive then. No device: memory_history.h feeds it the allocator's snapshot, and the tests feed it
// entries of their own.
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
/// stream `pause_marks` alternately start and end a stretch whose blocks are left out (the suite's
/// own work between calls; its segments stay, reserved memory while they last). Every other entry
/// of those two streams is left out too.
Timeline timeline_of(const std::vector<TraceEntry>& trace, const void* call_marks, const void* pause_marks);

/// An allocation (or a segment) the trace made and had not freed (released).
struct Alive {
  std::size_t size = 0;
  std::size_t entry = 0;  // the index of the entry that made it
};

/// The allocations and the allocator's segments alive after one entry, by address, and the bytes
/// of blocks and segments older than the trace (made before it began) that it freed by then.
struct Moment {
  std::unordered_map<std::size_t, Alive> alive;
  std::int64_t older_freed = 0;
  std::unordered_map<std::size_t, Alive> segments;
  std::int64_t older_segments_released = 0;
  /// Allocated bytes above the trace's start: what is alive less what older blocks gave back.
  std::int64_t bytes() const;
  /// Reserved bytes above the trace's start, the same way.
  std::int64_t reserved_bytes() const;
  /// The bytes of `segments` that hold at least one of `alive`: what emptying the allocator's
  /// cache could not give back then.
  std::int64_t held_segment_bytes() const;
};

/// The moment after entry `last` of `entries` (after all of them when `last` is past the end). A
/// block counts as allocated from its ALLOC entry to its FREE_COMPLETED one, and a segment as
/// reserved from its SEGMENT_ALLOC (or SEGMENT_MAP) entry to its SEGMENT_FREE (SEGMENT_UNMAP) one,
/// as the allocator's statistics count them.
Moment moment_after(const std::vector<TraceEntry>& entries, std::size_t last);

/// The index of the entry after which allocated bytes stood highest above the start, among the
/// entries up to `through` (all of them by default); none when they never rose above it.
std::optional<std::size_t> peak_entry(const std::vector<TraceEntry>& entries,
                                      std::size_t through = static_cast<std::size_t>(-1));

/// The same for reserved bytes.
std::optional<std::size_t> reserved_peak_entry(const std::vector<TraceEntry>& entries,
                                               std::size_t through = static_cast<std::size_t>(-1));

/// The call, counted from 1, that entry `index` of `timeline.entries` belongs to.
std::size_t call_of(const Timeline& timeline, std::size_t index);

}  // namespace zenith::bench
