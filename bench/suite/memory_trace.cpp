#include "memory_trace.h"

#include <cstdio>
#include <memory>

#include <torch/cuda.h>

#include "memory_history.h"
#include "timing.h"

namespace zenith::bench {

Call traced_calls(Call call, const torch::Device& device, std::string label, int calls, bool history) {
  if (!device.is_cuda() || calls <= 0) return call;
  torch::cuda::synchronize(device.index());
  const auto start = std::make_shared<AllocatorBytes>(allocator_bytes(device));
  const auto last = std::make_shared<AllocatorBytes>(*start);  // at the last line printed
  const auto made = std::make_shared<int>(0);
  const auto recorder = history ? std::make_shared<MemoryHistory>(device) : nullptr;
  return [call = std::move(call), device, label = std::move(label), calls, start, last, made,
          recorder](const Tensors& inputs) {
    auto outputs = call(inputs);
    if (*made < calls) {
      ++*made;
      torch::cuda::synchronize(device.index());
      if (recorder) recorder->mark_call_end();
      if (recorder && *made == calls) recorder->report(label, stderr);
      const auto b = allocator_bytes(device);
      if (*made > 1 && b.allocated_peak == last->allocated_peak && b.reserved_peak == last->reserved_peak) {
        return outputs;
      }
      *last = b;
      constexpr double kMiB = 1 << 20;
      auto mb = [&](std::int64_t bytes, std::int64_t base) { return static_cast<double>(bytes - base) / kMiB; };
      std::fprintf(stderr, "memory %s call %d: allocated %.1f MB (peak %.1f) reserved %.1f MB (peak %.1f)\n",
                   label.c_str(), *made, mb(b.allocated, start->allocated), mb(b.allocated_peak, start->allocated),
                   mb(b.reserved, start->reserved), mb(b.reserved_peak, start->reserved));
    }
    return outputs;
  };
}

}  // namespace zenith::bench
