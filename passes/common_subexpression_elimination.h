// Common-subexpression elimination: a pure node identical to an earlier one reuses its results.
#pragma once

#include "passes/pass.h"

namespace zenith::passes {

class CommonSubexpressionElimination : public Pass {
 public:
  std::string name() const override { return "cse"; }
  void run(ir::Graph& graph, PassReport& report) override;
};

}  // namespace zenith::passes
