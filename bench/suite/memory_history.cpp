#include "memory_history.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <tuple>
#include <vector>

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <torch/csrc/profiler/combined_traceback.h>

#include "allocation_timeline.h"

namespace zenith::bench {
namespace {

namespace allocator = c10::cuda::CUDACachingAllocator;

constexpr double kMiB = 1 << 20;
// Enough for a decoder's first three generations in eager (about a million entries).
constexpr std::size_t kMaxEntries = 4'000'000;
// Frames that say where an allocation was made, after those of the allocator and the unwinder.
constexpr std::size_t kFramesPerGroup = 4;

MemoryHistory* active = nullptr;  // the one recording, if any

std::shared_ptr<c10::GatheredContext> cpp_stack() { return torch::CapturedTraceback::gather(false, false, true); }

void stop_recording() {
  allocator::recordHistory(false, nullptr, 0, c10::CachingDeviceAllocator::RecordContext::NEVER, false, {});
}

// A mark in the history: an allocation on `stream`, which nothing else uses.
void mark_on(const torch::Device& device, void* stream) {
  c10::cuda::CUDAStreamGuard on_stream(c10::cuda::getStreamFromExternal(static_cast<cudaStream_t>(stream), device.index()));
  (void)at::empty({1}, at::TensorOptions().dtype(at::kByte).device(device));
}

bool starts_with(const std::string& text, const char* prefix) { return text.rfind(prefix, 0) == 0; }

// Frames every allocation's stack has or that name no place of its own: the allocator's, the
// unwinder's, the dispatcher's and the factories' that make an empty tensor.
bool plumbing(const std::string& function) {
  for (const char* prefix : {"c10::", "torch::unwind", "torch::CapturedTraceback", "std::", "at::detail::", "at::_ops::",
                             "at::empty", "at::native::empty", "at::native::resize", "at::(anonymous namespace)::"}) {
    if (starts_with(function, prefix)) return true;
  }
  return function.empty() || function == "??" || function.find("wrapper_") != std::string::npos ||
         function.find("cpp_stack") != std::string::npos;
}

struct Group {
  std::size_t bytes = 0;
  std::size_t count = 0;
  std::size_t largest = 0;
  void add(std::size_t size) {
    bytes += size;
    ++count;
    largest = std::max(largest, size);
  }
};

// Where each alive allocation was made: its first frames outside the allocator, joined.
std::map<std::string, Group> grouped(const std::vector<TraceEntry>& entries,
                                     const std::unordered_map<std::size_t, Alive>& alive) {
  std::vector<torch::CapturedTraceback*> stacks;
  std::vector<std::size_t> sizes;
  std::map<std::string, Group> groups;
  for (const auto& [address, a] : alive) {
    auto* stack = dynamic_cast<torch::CapturedTraceback*>(entries[a.entry].context_.get());
    if (stack == nullptr) {
      groups["(no stack recorded)"].add(a.size);
      continue;
    }
    stacks.push_back(stack);
    sizes.push_back(a.size);
  }
  const auto symbols = torch::symbolize(stacks);
  for (std::size_t s = 0; s < stacks.size(); ++s) {
    std::string where;
    std::size_t kept = 0;
    for (auto index : symbols.tracebacks[s]) {
      const auto& frame = symbols.all_frames[index];
      if (plumbing(frame.funcname)) continue;
      where += (kept == 0 ? "" : " <- ") + frame.funcname.substr(0, 90);
      if (++kept == kFramesPerGroup) break;
    }
    groups[where.empty() ? "(allocator frames only)" : where].add(sizes[s]);
  }
  return groups;
}

// Groups of `made` (allocations or segments) by where they were made, largest first.
void print_groups(const std::vector<TraceEntry>& entries, const std::unordered_map<std::size_t, Alive>& made,
                  const std::string& label, std::FILE* out, int groups) {
  const auto by_place = grouped(entries, made);
  std::vector<std::pair<std::string, Group>> sorted(by_place.begin(), by_place.end());
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second.bytes > b.second.bytes; });
  for (std::size_t i = 0; i < sorted.size() && i < static_cast<std::size_t>(groups); ++i) {
    const auto& [where, g] = sorted[i];
    std::fprintf(out, "history %s:   %.2f MB in %zu (largest %.2f MB) at %s\n", label.c_str(), g.bytes / kMiB, g.count,
                 g.largest / kMiB, where.c_str());
  }
}

// The allocated bytes after entry `at`, and the allocations alive then by where they were made.
void print_moment(const std::vector<TraceEntry>& entries, std::size_t at, const std::string& what,
                  const std::string& label, std::FILE* out, int groups) {
  const auto moment = moment_after(entries, at);
  std::fprintf(out, "history %s: %s: %.1f MB allocated above the start (older blocks freed by then, counted: %.2f MB)\n",
               label.c_str(), what.c_str(), moment.bytes() / kMiB, moment.older_freed / kMiB);
  print_groups(entries, moment.alive, label, out, groups);
}

// The reserved bytes after entry `at`, and the segments the history made and had not released
// then, by the stack of the allocation that made each.
void print_reserved_moment(const std::vector<TraceEntry>& entries, std::size_t at, const std::string& what,
                           const std::string& label, std::FILE* out, int groups) {
  const auto moment = moment_after(entries, at);
  std::fprintf(out,
               "history %s: %s: %.1f MB reserved above the start; segments made since: %.1f MB, %.1f MB of them "
               "holding a live allocation (emptying the cache cannot give those back); -%.2f MB of older segments "
               "released\n",
               label.c_str(), what.c_str(), moment.reserved_bytes() / kMiB,
               (moment.reserved_bytes() + moment.older_segments_released) / kMiB, moment.held_segment_bytes() / kMiB,
               moment.older_segments_released / kMiB);
  print_groups(entries, moment.segments, label, out, groups);
}

void print_segments(const allocator::SnapshotInfo& snapshot, c10::DeviceIndex device, const std::string& label,
                    std::FILE* out) {
  // (pool, stream) -> segments' bytes, the bytes of their live blocks, how many, the free bytes of
  // those with a live block.
  using Sums = std::tuple<std::size_t, std::size_t, int, std::size_t>;
  std::map<std::tuple<std::uint64_t, std::uint64_t, const void*>, Sums> by_pool;
  for (const auto& segment : snapshot.segments) {
    if (segment.device != device) continue;
    auto& [total, allocated, count, stuck] = by_pool[{segment.owner_private_pool_id.first,
                                                      segment.owner_private_pool_id.second, segment.stream}];
    total += segment.total_size;
    allocated += segment.allocated_size;
    ++count;
    if (segment.allocated_size > 0) stuck += segment.total_size - segment.allocated_size;
  }
  for (const auto& [key, value] : by_pool) {
    const auto& [pool_a, pool_b, stream] = key;
    const auto& [total, allocated, count, stuck] = value;
    std::fprintf(out,
                 "history %s: reserved now in pool (%llu,%llu) stream %p: %.1f MB in %d segments, %.1f MB of it "
                 "allocated, %.1f MB free beside a live block\n",
                 label.c_str(), static_cast<unsigned long long>(pool_a), static_cast<unsigned long long>(pool_b), stream,
                 total / kMiB, count, allocated / kMiB, stuck / kMiB);
  }
}

}  // namespace

MemoryHistory::MemoryHistory(const torch::Device& device) : device_(device) {
  if (!device.is_cuda()) return;
  TORCH_CHECK(active == nullptr, "one memory history at a time: the allocator keeps a single one");
  // LibTorch's own symbolizer reads the libraries' symbol tables in process; its default runs
  // addr2line, which finds no names in LibTorch's libraries (no debug information) and takes
  // minutes over them. Read once, at the first symbolization; a caller's choice stands.
  setenv("TORCH_SYMBOLIZE_MODE", "fast", 0);
  for (void** stream : {&marker_stream_, &pause_stream_}) {
    cudaStream_t made = nullptr;
    TORCH_CHECK(cudaStreamCreateWithFlags(&made, cudaStreamNonBlocking) == cudaSuccess,
                "creating a stream for the memory history's marks failed");
    *stream = made;
  }
  allocator::recordHistory(true, cpp_stack, kMaxEntries, c10::CachingDeviceAllocator::RecordContext::ALLOC,
                           /*clearHistory=*/true, {});
  recording_ = true;
  active = this;
}

MemoryHistory::~MemoryHistory() {
  if (active == this) active = nullptr;
  if (recording_) stop_recording();
  // The streams stay: the marks' blocks are cached for them, as for a stream from LibTorch's pool.
}

MemoryHistory* MemoryHistory::recording() { return active; }

void MemoryHistory::mark_call_end() {
  if (recording_) mark_on(device_, marker_stream_);
}

void MemoryHistory::mark_pause() {
  if (recording_) mark_on(device_, pause_stream_);
}

void MemoryHistory::report(const std::string& label, std::FILE* out, int groups) {
  if (!recording_) return;
  const auto snapshot = allocator::snapshot({0, 0}, true);
  stop_recording();
  recording_ = false;
  active = nullptr;
  const auto index = static_cast<std::size_t>(device_.index());
  if (index >= snapshot.device_traces.size()) return;
  const auto& trace = snapshot.device_traces[index];
  const auto timeline = timeline_of(trace, marker_stream_, pause_stream_);
  std::fprintf(out, "history %s: %zu entries recorded%s\n", label.c_str(), timeline.entries.size(),
               trace.size() >= kMaxEntries ? " (the oldest were dropped)" : "");
  const auto peak = peak_entry(timeline.entries);
  if (!peak) {
    std::fprintf(out, "history %s: allocated memory never rose above the start\n", label.c_str());
  } else {
    const auto call = call_of(timeline, *peak);
    print_moment(timeline.entries, *peak, "the peak, in call " + std::to_string(call), label, out, groups);
    // The first call (a Zenith signature's capture, compile and packing) on its own, when the
    // run's peak came later.
    if (call > 1 && !timeline.call_ends.empty() && timeline.call_ends.front() > 0) {
      if (const auto first = peak_entry(timeline.entries, timeline.call_ends.front() - 1)) {
        print_moment(timeline.entries, *first, "the first call's peak", label, out, groups);
      }
    }
  }
  if (const auto reserved = reserved_peak_entry(timeline.entries)) {
    const auto call = call_of(timeline, *reserved);
    print_reserved_moment(timeline.entries, *reserved, "the reserved peak, in call " + std::to_string(call), label, out,
                          groups);
  }
  // What stays reserved once the first call is over (packing and the capture hand memory back).
  if (!timeline.call_ends.empty() && timeline.call_ends.front() > 0) {
    print_reserved_moment(timeline.entries, timeline.call_ends.front() - 1, "after the first call", label, out, groups);
  }
  print_segments(snapshot, device_.index(), label, out);
}

HistoryPaused::HistoryPaused() : history_(MemoryHistory::recording()) {
  if (history_ != nullptr) history_->mark_pause();
}

HistoryPaused::~HistoryPaused() {
  if (history_ != nullptr) history_->mark_pause();
}

}  // namespace zenith::bench
