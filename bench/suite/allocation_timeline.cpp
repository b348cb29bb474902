#include "allocation_timeline.h"

#include <algorithm>

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
    if (!paused) timeline.entries.push_back(e);
  }
  return timeline;
}

std::int64_t Moment::bytes() const {
  std::int64_t sum = -older_freed;
  for (const auto& [address, a] : alive) sum += static_cast<std::int64_t>(a.size);
  return sum;
}

namespace {

// Replays `entries` through `last`, calling `after(index, bytes)` after each allocation.
template <typename After>
Moment replay(const std::vector<TraceEntry>& entries, std::size_t last, After after) {
  Moment m;
  std::int64_t now = 0;
  for (std::size_t i = 0; i <= last && i < entries.size(); ++i) {
    const auto& e = entries[i];
    if (e.action_ == TraceEntry::ALLOC) {
      m.alive[e.addr_] = Alive{e.size_, i};
      now += static_cast<std::int64_t>(e.size_);
      after(i, now);
    } else if (e.action_ == TraceEntry::FREE_COMPLETED) {
      now -= static_cast<std::int64_t>(e.size_);
      if (m.alive.erase(e.addr_) == 0) m.older_freed += static_cast<std::int64_t>(e.size_);
    }
  }
  return m;
}

}  // namespace

Moment moment_after(const std::vector<TraceEntry>& entries, std::size_t last) {
  return replay(entries, last, [](std::size_t, std::int64_t) {});
}

std::optional<std::size_t> peak_entry(const std::vector<TraceEntry>& entries, std::size_t through) {
  std::optional<std::size_t> peak;
  std::int64_t highest = 0;
  replay(entries, through, [&](std::size_t index, std::int64_t bytes) {
    if (bytes > highest) {
      highest = bytes;
      peak = index;
    }
  });
  return peak;
}

std::size_t call_of(const Timeline& timeline, std::size_t index) {
  const auto& ends = timeline.call_ends;
  return static_cast<std::size_t>(std::upper_bound(ends.begin(), ends.end(), index) - ends.begin()) + 1;
}

}  // namespace zenith::bench
