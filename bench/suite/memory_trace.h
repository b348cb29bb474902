// `--memory-trace`: where a mode's memory goes during its first calls. The first of them, and each
// that raised the allocated or reserved peak, is followed by a line on standard error with the
// device memory allocated and reserved above the mode's start, now and at the peak so far, so that
// a peak column's figure can be put on the call that made it (a Zenith signature's capture and
// packing, its first plan run, its graph's capture). Off by default: it waits for the device after
// each call it watches, which would change the timed calls. With `--memory-history` as well, the
// allocator records those calls' allocations with their C++ stacks and, after the last, says which
// of them made the peak (memory_history.h).
#pragma once

#include <string>

#include <torch/torch.h>

#include "modes.h"

namespace zenith::bench {

/// `call`, which after each of its first `calls` calls (on a CUDA device; elsewhere `call` itself)
/// waits for the device and, after the first and after any that raised a peak, prints "memory
/// <label> call <n>: allocated A MB (peak P) reserved R MB (peak Q)", in MB above what the
/// allocator held when this was made. With `history`, the allocator's history over those calls is
/// recorded from now on and reported after the last of them (MemoryHistory::report).
Call traced_calls(Call call, const torch::Device& device, std::string label, int calls, bool history = false);

}  // namespace zenith::bench
