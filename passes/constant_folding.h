// Constant folding: evaluates, once at compile time, nodes that depend only on constants.
// Parameters are never constants: they stay live so that an optimizer step is seen. Nodes marked
// size-dependent (dynamic shapes) are never folded either.
#pragma once

#include <cstddef>

#include "passes/pass.h"

namespace zenith::passes {

class ConstantFolding : public Pass {
 public:
  /// Results larger than `max_bytes` are left to run at every call rather than kept in memory.
  explicit ConstantFolding(std::size_t max_bytes = 16u << 20) : max_bytes_(max_bytes) {}
  std::string name() const override { return "fold_constants"; }
  void run(ir::Graph& graph, PassReport& report) override;

 private:
  std::size_t max_bytes_;
};

}  // namespace zenith::passes
