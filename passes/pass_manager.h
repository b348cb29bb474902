// Runs named passes in order, verifying the graph after each and timing them.
#pragma once

#include <memory>
#include <vector>

#include "passes/pass.h"

namespace zenith::passes {

class PassManager {
 public:
  /// Appends a pass.
  void add(std::unique_ptr<Pass> pass);
  /// Runs every pass on `graph`; throws zenith::Error naming the pass when one leaves the graph
  /// invalid. Returns one report per pass.
  std::vector<PassReport> run(ir::Graph& graph) const;

  /// The default pipeline: constant folding, CSE, attention fusion, DCE, elementwise fusion; for
  /// an `inference` plan, grouped-query attention without repeated keys and values and rotary
  /// embeddings as elementwise ops too, and when it
  /// keeps derived values (CompileOptions::keep_derived_values), sibling products concatenated
  /// (their concatenated weights are derived values).
  static PassManager default_pipeline(const CompileOptions& options, bool inference);

 private:
  std::vector<std::unique_ptr<Pass>> passes_;
};

}  // namespace zenith::passes
