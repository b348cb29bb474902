// What an IR node's ATen schema says about aliasing and mutation.
#pragma once

#include <vector>

#include <ATen/core/function_schema.h>

#include "core/graph.h"

namespace zenith::ir {

/// The registered schema of `node`; throws zenith::Error naming the op when there is none.
const c10::FunctionSchema& schema_of(const Node& node);

/// Aliasing facts of one node.
struct AliasFacts {
  /// Some result is an alias of an input without writing it (view ops): the host runs it.
  bool is_view = false;
  /// Tensor value ids the node writes in place.
  std::vector<int> mutated_inputs;
  /// Per output: the value id whose memory the output is because the op wrote it in place
  /// (Tensor(a!) returns), or -1.
  std::vector<int> output_writes;
};

/// Reads the schema's alias annotations for `node`.
AliasFacts alias_facts(const Node& node);

}  // namespace zenith::ir
