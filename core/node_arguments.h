// Reading a node's arguments by name, as the rewriting passes and the capture's rewrites do.
#pragma once

#include <string>
#include <variant>

#include "core/graph.h"

namespace zenith::ir {

/// The id of the tensor value argument `name` of `node` reads, or -1 when the node has no such
/// argument or it holds no single tensor (None, a number, a list).
inline int tensor_arg(const Node& node, const std::string& name) {
  const auto* arg = node.arg(name);
  const auto* ref = arg ? std::get_if<ValueRef>(&arg->value) : nullptr;
  return ref ? ref->id : -1;
}

}  // namespace zenith::ir
