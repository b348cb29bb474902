"""How the Python peers are timed, the same way as the C++ runner (bench/suite/timing.h): CUDA
events around each call with the device synchronized between calls, medians and 90th
percentiles, wall-clock time for first calls, peak device memory above a starting point."""
import math
import time

import torch


def synchronize():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def wall_ms(fn):
    """Milliseconds a caller waits for fn(), device work included; returns (ms, fn's result)."""
    synchronize()
    start = time.perf_counter()
    out = fn()
    synchronize()
    return (time.perf_counter() - start) * 1000, out


def summarize(ms):
    """(median, p90, max, count) of a list of milliseconds, as bench/suite/timing.cpp computes them."""
    if not ms:
        return 0.0, 0.0, 0.0, 0
    s = sorted(ms)
    p90 = s[min(len(s) - 1, math.ceil(0.9 * len(s)) - 1)]
    return s[len(s) // 2], p90, s[-1], len(s)


def one_call_ms(fn):
    if not torch.cuda.is_available():
        return wall_ms(fn)[0]
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop)


def time_calls(fn, seconds, min_reps, max_reps):
    ms, start = [], time.perf_counter()
    while len(ms) < max_reps and (len(ms) < min_reps or time.perf_counter() - start < seconds):
        ms.append(one_call_ms(fn))
    return summarize(ms)


class PeakMemory:
    """Device memory above what was in use when made, at its peak (MB); None on CPU. As timing.h's:
    the allocator's unused blocks are given back first, and both allocated and reserved memory
    (the allocator's segments, CUDA graphs' pools included) are measured."""

    def __init__(self):
        self.base = None
        if torch.cuda.is_available():
            synchronize()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated()
            self.reserved_base = torch.cuda.memory_reserved()

    def record(self, row):
        """Writes the peaks so far into row's "peak_mb" (allocated) and "reserved_mb"; on CPU they
        stay None."""
        if self.base is None:
            return
        synchronize()
        row["peak_mb"] = (torch.cuda.max_memory_allocated() - self.base) / (1 << 20)
        row["reserved_mb"] = (torch.cuda.max_memory_reserved() - self.reserved_base) / (1 << 20)
