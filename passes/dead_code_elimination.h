// Dead-code elimination: drops nodes whose results nobody reads and that have no side effect.
#pragma once

#include "passes/pass.h"

namespace zenith::passes {

class DeadCodeElimination : public Pass {
 public:
  std::string name() const override { return "dce"; }
  void run(ir::Graph& graph, PassReport& report) override;
};

}  // namespace zenith::passes
