#include "allocation_timeline.h"

#include <algorithm>
#include <map>
#include <set>

namespace zenith::bench {

Timeline timeline_of(const std::vector<TraceEntry>& trace, const void* call_marks, const void* pause_marks) {
  Timeline timeline;
  bool paused = false;
  for (const auto& e : trace) {
    if (e.stream_ == call_marks || e.stream_ == pause_marks) {
      if (e.action_ != TraceEntry::ALLOC) continue;
      if (e.stream_ == pause_marks) paused = !paused;
      else timeline.call_ends.push_back(timeline.entries.size());
      continue;
    }
    // A paused stretch's blocks are left out, its segments not: they are reserved while they last
    // and may be released after it.
    const bool segment = e.action_ == TraceEntry::SEGMENT_ALLOC || e.action_ == TraceEntry::SEGMENT_FREE ||
                         e.action_ == TraceEntry::SEGMENT_MAP || e.action_ == TraceEntry::SEGMENT_UNMAP;
    if (!paused || segment) timeline.entries.push_back(e);
  }
  return timeline;
}

namespace {

std::int64_t sum_of(const std::unordered_map<std::size_t, Alive>& made, std::int64_t older) {
  std::int64_t sum = -older;
  for (const auto& [address, a] : made) sum += static_cast<std::int64_t>(a.size);
  return sum;
}

// Running sums of a replay, above the trace's start.
struct Totals {
  std::int64_t allocated = 0;
  std::int64_t reserved = 0;
};

// One of the two books a replay keeps: blocks (allocated) or segments (reserved).
void made(std::unordered_map<std::size_t, Alive>& book, std::int64_t& total, const TraceEntry& e, std::size_t index) {
  book[e.addr_] = Alive{e.size_, index};
  total += static_cast<std::int64_t>(e.size_);
}
void gone(std::unordered_map<std::size_t, Alive>& book, std::int64_t& older, std::int64_t& total, const TraceEntry& e) {
  if (book.erase(e.addr_) == 0) older += static_cast<std::int64_t>(e.size_);
  total -= static_cast<std::int64_t>(e.size_);
}

// Replays `entries` through `last`, calling `after(index, totals)` after each entry that made a
// block or a segment.
template <typename After>
Moment replay(const std::vector<TraceEntry>& entries, std::size_t last, After after) {
  Moment m;
  Totals t;
  for (std::size_t i = 0; i <= last && i < entries.size(); ++i) {
    const auto& e = entries[i];
    switch (e.action_) {
      case TraceEntry::ALLOC: made(m.alive, t.allocated, e, i); break;
      case TraceEntry::FREE_COMPLETED: gone(m.alive, m.older_freed, t.allocated, e); continue;
      case TraceEntry::SEGMENT_ALLOC:
      case TraceEntry::SEGMENT_MAP: made(m.segments, t.reserved, e, i); break;
      case TraceEntry::SEGMENT_FREE:
      case TraceEntry::SEGMENT_UNMAP: gone(m.segments, m.older_segments_released, t.reserved, e); continue;
      default: continue;
    }
    after(i, t);
  }
  return m;
}

// The entry after which `measure` of the running totals stood highest above zero.
template <typename Measure>
std::optional<std::size_t> highest(const std::vector<TraceEntry>& entries, std::size_t through, Measure measure) {
  std::optional<std::size_t> peak;
  std::int64_t top = 0;
  replay(entries, through, [&](std::size_t index, const Totals& t) {
    if (measure(t) > top) {
      top = measure(t);
      peak = index;
    }
  });
  return peak;
}

}  // namespace

std::int64_t Moment::bytes() const { return sum_of(alive, older_freed); }

std::int64_t Moment::reserved_bytes() const { return sum_of(segments, older_segments_released); }

std::int64_t Moment::held_segment_bytes() const {
  std::map<std::size_t, std::size_t> by_start;  // segment address -> its size
  for (const auto& [address, s] : segments) by_start[address] = s.size;
  std::set<std::size_t> held;
  for (const auto& [address, a] : alive) {
    auto it = by_start.upper_bound(address);
    if (it == by_start.begin()) continue;
    --it;
    if (address < it->first + it->second) held.insert(it->first);
  }
  std::int64_t bytes = 0;
  for (auto start : held) bytes += static_cast<std::int64_t>(by_start[start]);
  return bytes;
}

Moment moment_after(const std::vector<TraceEntry>& entries, std::size_t last) {
  return replay(entries, last, [](std::size_t, const Totals&) {});
}

std::optional<std::size_t> peak_entry(const std::vector<TraceEntry>& entries, std::size_t through) {
  return highest(entries, through, [](const Totals& t) { return t.allocated; });
}

std::optional<std::size_t> reserved_peak_entry(const std::vector<TraceEntry>& entries, std::size_t through) {
  return highest(entries, through, [](const Totals& t) { return t.reserved; });
}

std::size_t call_of(const Timeline& timeline, std::size_t index) {
  const auto& ends = timeline.call_ends;
  return static_cast<std::size_t>(std::upper_bound(ends.begin(), ends.end(), index) - ends.begin()) + 1;
}

}  // namespace zenith::bench
