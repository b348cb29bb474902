// A step against the steps of similar length: issue 16's stall check for the dynamic-shape sweep
// (no step after warm-up above 1.5x the median of similar lengths), read the way the torture test
// (examples/dynamic_shapes) reads it: the steps within 10% of a step's length, itself among them.
#pragma once

#include <cstddef>
#include <vector>

namespace zenith::bench {

struct SlowestStep {
  double ratio = 0;       ///< its time over the median time of the steps of similar length
  std::size_t index = 0;  ///< which step, in the order given
};

/// The step whose time is the largest multiple of the median time of the steps within 10% of its
/// length (itself included, so a step alone at its length has ratio 1). `lengths` and `ms` are one
/// step each, in the same order; an empty sweep, or steps whose median is not positive, give 0.
SlowestStep slowest_against_similar_lengths(const std::vector<double>& lengths, const std::vector<double>& ms);

}  // namespace zenith::bench
