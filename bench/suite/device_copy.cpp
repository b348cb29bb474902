#include "device_copy.h"

#include <torch/torch.h>

#include "fixed_shape.h"
#include "timing.h"

namespace zenith::bench {

std::int64_t copy_yardstick_elements(const Context& context) {
  return std::int64_t{1} << (context.smoke ? 12 : 26);
}

Result device_copy(const Context& context, const CaseSpec& spec, const at::Tensor& x) {
  Result r = named_result(spec, "device copy");
  auto target = torch::empty_like(x);
  for (int i = 0; i < context.warmup_calls(); ++i) target.copy_(x);
  const auto samples = time_calls(context.device, [&] { target.copy_(x); }, context.seconds_per_mode,
                                  context.min_reps(), context.max_reps());
  r.median_ms = samples.median_ms;
  r.p90_ms = samples.p90_ms;
  r.reps = samples.reps;
  r.extra["bytes_moved"] = 2.0 * x.numel() * x.element_size();
  return r;
}

}  // namespace zenith::bench
