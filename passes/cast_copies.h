// Casts as the elementwise ops they are. `x.to(dtype)` is an alias of x when x has that dtype
// already, so its schema marks the result as a view and the partition leaves every `aten::to` to
// the host, one ATen copy each; but a cast to another dtype always makes a new tensor. Written as
// `aten::_to_copy` (what `to` calls then), it fuses with its neighbours: the float32 bias added to
// a bfloat16 product and the cast back become one kernel, as do a bfloat16 gradient cast to float32
// and the sum it joins.
#pragma once

#include "passes/pass.h"

namespace zenith::passes {

class CastCopies : public Pass {
 public:
  std::string name() const override { return "cast_copies"; }
  /// Counter "rewritten": plain `aten::to.dtype` nodes (no copy forced, layout kept) whose result
  /// dtype differs from their input's, now `aten::_to_copy` with that dtype (strides preserved, as
  /// `to` preserves them). Casts to the input's own dtype stay aliases.
  void run(ir::Graph& graph, PassReport& report) override;
};

}  // namespace zenith::passes
