// A pass rewrites a Graph in place and reports what it did.
#pragma once

#include <string>

#include "core/graph.h"
#include "zenith/options.h"

namespace zenith::passes {

class Pass {
 public:
  virtual ~Pass() = default;
  /// Short name used in reports and dumps, e.g. "dce".
  virtual std::string name() const = 0;
  /// Rewrites `graph`; records pass-specific counts in `report.counters`.
  virtual void run(ir::Graph& graph, PassReport& report) = 0;
};

}  // namespace zenith::passes
