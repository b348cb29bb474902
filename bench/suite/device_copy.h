// The suite's yardstick for memory-bound work: one device-to-device copy, timed as the modes are.
// Its bytes moved (a read and a write per byte) over its median time is the copy bandwidth that
// report.py divides by: the elementwise chain's GB/s as a percent of copy, and the decoders'
// weight-streaming bound (their weights at that bandwidth). The chain's case copies its own input;
// each decoder case copies a float32 tensor of the chain's size, so that a run of the decoders
// alone (`scripts/bench --only decode_...`) reports the bound too.
#pragma once

#include <cstdint>

#include <ATen/core/Tensor.h>

#include "case_spec.h"
#include "context.h"
#include "result.h"

namespace zenith::bench {

/// Float32 elements of the decoders' copy: 2^26 (256 MB, the chain's 2^26), 2^12 in a smoke run.
std::int64_t copy_yardstick_elements(const Context& context);

/// The mode "device copy" of `spec`: `x` copied into a tensor like it, warmed up and timed; its
/// extra "bytes_moved" is twice x's bytes.
Result device_copy(const Context& context, const CaseSpec& spec, const at::Tensor& x);

}  // namespace zenith::bench
