// Round-trip casts: `to(to(x, wider), x's dtype)` is x, value for value, when the wider dtype holds
// every value of x's exactly (float16 and bfloat16 in float32 or float64, float32 in float64). Mixed
// precision makes them: autocast's backward casts a bfloat16 gradient to float32 for one reader and
// the derivative rules cast it back for another. Each costs a kernel over the whole tensor.
#pragma once

#include "passes/pass.h"

namespace zenith::passes {

class RoundTripCastElimination : public Pass {
 public:
  std::string name() const override { return "round_trip_casts"; }
  /// Counter "removed": the casts back whose readers now read the value before the first cast. The
  /// widening cast stays for its other readers (dead-code elimination drops it when none is left).
  /// Left alone: a cast back whose result is returned (the caller would get x's tensor itself), whose
  /// layout differs from x's, or where x or either result may be written in place.
  void run(ir::Graph& graph, PassReport& report) override;
};

}  // namespace zenith::passes
