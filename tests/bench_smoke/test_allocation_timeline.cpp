// The suite's replay of the allocator's history (bench/suite/allocation_timeline.h) on traces
// written by hand: the peak, the allocations alive then, frees of blocks older than the trace, and
// the marks that end calls and leave the suite's own work out.
#include <gtest/gtest.h>

#include "allocation_timeline.h"

namespace zenith::bench {
namespace {

using Action = TraceEntry::Action;

int calls_stream, pauses_stream, work_stream;  // distinct addresses standing for streams

TraceEntry entry(Action action, std::size_t addr, std::size_t size, const void* stream = &work_stream) {
  return TraceEntry(action, 0, addr, size, const_cast<void*>(stream), {0, 0}, 0);
}
TraceEntry alloc(std::size_t addr, std::size_t size) { return entry(Action::ALLOC, addr, size); }
TraceEntry freed(std::size_t addr, std::size_t size) { return entry(Action::FREE_COMPLETED, addr, size); }
TraceEntry segment(std::size_t addr, std::size_t size) { return entry(Action::SEGMENT_ALLOC, addr, size); }
TraceEntry released(std::size_t addr, std::size_t size) { return entry(Action::SEGMENT_FREE, addr, size); }
TraceEntry call_end() { return entry(Action::ALLOC, 1, 512, &calls_stream); }
TraceEntry pause() { return entry(Action::ALLOC, 2, 512, &pauses_stream); }

TEST(AllocationTimeline, ThePeakIsTheMomentTheLiveBytesStoodHighest) {
  const std::vector<TraceEntry> trace = {alloc(100, 10), alloc(200, 20), freed(100, 10), alloc(300, 5), freed(200, 20)};
  const auto peak = peak_entry(trace);
  ASSERT_TRUE(peak.has_value());
  EXPECT_EQ(*peak, 1u);
  const auto moment = moment_after(trace, *peak);
  EXPECT_EQ(moment.bytes(), 30);
  ASSERT_EQ(moment.alive.size(), 2u);
  EXPECT_EQ(moment.alive.at(200).entry, 1u);
  EXPECT_EQ(moment_after(trace, trace.size()).bytes(), 5);
}

TEST(AllocationTimeline, AFreeRequestedStillCountsUntilItCompletes) {
  // A block used on another stream is freed only once that stream is past it.
  const std::vector<TraceEntry> trace = {alloc(100, 10), entry(Action::FREE_REQUESTED, 100, 10), alloc(200, 10),
                                         freed(100, 10)};
  EXPECT_EQ(*peak_entry(trace), 2u);
  EXPECT_EQ(moment_after(trace, 2).bytes(), 20);
}

TEST(AllocationTimeline, BlocksOlderThanTheTraceGiveTheirBytesBack) {
  // Packing: a new block made beside old weights (made before the history) that then go.
  const std::vector<TraceEntry> trace = {alloc(100, 40), freed(900, 20), freed(901, 20), alloc(200, 8)};
  EXPECT_EQ(*peak_entry(trace), 0u);
  const auto end = moment_after(trace, trace.size());
  EXPECT_EQ(end.older_freed, 40);
  EXPECT_EQ(end.bytes(), 8);
  EXPECT_FALSE(peak_entry({freed(900, 20), alloc(100, 10)}).has_value()) << "never above the start";
}

TEST(AllocationTimeline, MarksEndCallsAndPausesLeaveTheSuitesWorkOut) {
  const std::vector<TraceEntry> trace = {alloc(100, 10), call_end(), pause(), alloc(500, 1000), freed(500, 1000),
                                         pause(), alloc(200, 30), call_end(), freed(200, 30), call_end()};
  const auto timeline = timeline_of(trace, &calls_stream, &pauses_stream);
  ASSERT_EQ(timeline.entries.size(), 3u) << "the marks and the paused stretch are left out";
  EXPECT_EQ(timeline.call_ends, (std::vector<std::size_t>{1, 2, 3}));
  const auto peak = peak_entry(timeline.entries);
  ASSERT_TRUE(peak.has_value());
  EXPECT_EQ(moment_after(timeline.entries, *peak).bytes(), 40);
  EXPECT_EQ(call_of(timeline, *peak), 2u);
  EXPECT_EQ(call_of(timeline, 0), 1u);
  EXPECT_EQ(call_of(timeline, 2), 3u);
  EXPECT_EQ(*peak_entry(timeline.entries, timeline.call_ends.front() - 1), 0u) << "the first call's own peak";
}

TEST(AllocationTimeline, SegmentsAreReservedUntilReleasedAndHeldByTheBlocksInThem) {
  // Two 20-byte segments; a block in each, one freed; the empty segment is released, then a
  // segment older than the trace.
  const std::vector<TraceEntry> trace = {segment(1000, 20), alloc(1000, 8),  segment(2000, 20), alloc(2004, 4),
                                         freed(1000, 8),    released(1000, 20), released(9000, 20)};
  const auto peak = reserved_peak_entry(trace);
  ASSERT_TRUE(peak.has_value());
  EXPECT_EQ(*peak, 2u);
  const auto at_peak = moment_after(trace, *peak);
  EXPECT_EQ(at_peak.reserved_bytes(), 40);
  EXPECT_EQ(at_peak.held_segment_bytes(), 20) << "the second segment holds no block yet";
  const auto after_blocks = moment_after(trace, 3);
  EXPECT_EQ(after_blocks.held_segment_bytes(), 40) << "a block at 2004 lies in the segment at 2000";
  const auto end = moment_after(trace, trace.size());
  EXPECT_EQ(end.segments.size(), 1u);
  EXPECT_EQ(end.older_segments_released, 20);
  EXPECT_EQ(end.reserved_bytes(), 0);
  EXPECT_EQ(end.held_segment_bytes(), 20);
  EXPECT_FALSE(reserved_peak_entry({released(9000, 20)}).has_value());
}

TEST(AllocationTimeline, APausedStretchKeepsItsSegments) {
  const std::vector<TraceEntry> trace = {pause(), segment(3000, 64), alloc(3000, 64), freed(3000, 64), pause(),
                                         released(3000, 64)};
  const auto timeline = timeline_of(trace, &calls_stream, &pauses_stream);
  ASSERT_EQ(timeline.entries.size(), 2u);
  EXPECT_FALSE(peak_entry(timeline.entries).has_value()) << "the stretch's block is left out";
  EXPECT_EQ(*reserved_peak_entry(timeline.entries), 0u);
  EXPECT_EQ(moment_after(timeline.entries, timeline.entries.size()).reserved_bytes(), 0);
}

}  // namespace
}  // namespace zenith::bench
