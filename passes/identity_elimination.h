// Identity elimination: drops nodes whose eager result is their input tensor itself, and makes their
// readers read that input. Inference graphs of real models hold many: a dropout in eval mode
// (train=false) or with p=0 returns its input, yet each would cost a dispatch, and a node a code
// generator does not know splits a fusion group (BERT has 5, Swin 16).
#pragma once

#include "passes/pass.h"

namespace zenith::passes {

class IdentityElimination : public Pass {
 public:
  std::string name() const override { return "identities"; }
  /// Counter "removed": the nodes dropped.
  void run(ir::Graph& graph, PassReport& report) override;
};

/// The input value a node returns unchanged (eager hands back that very tensor), or -1: dropout,
/// feature_dropout, alpha_dropout and feature_alpha_dropout with train=false or p=0.
int returned_input(const ir::Node& node);

}  // namespace zenith::passes
