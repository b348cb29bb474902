// Reading a node's arguments by name, as the rewriting passes and the capture's rewrites do, and
// the plain cast they recognize and write.
#pragma once

#include <cstdint>
#include <optional>
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

/// The number argument `name` of `node` holds (the trace records a number as a double or, when
/// integral, an int), or nullopt when the node has no such argument or it holds no number.
inline std::optional<double> number_arg(const Node& node, const std::string& name) {
  const auto* arg = node.arg(name);
  if (arg == nullptr) return std::nullopt;
  if (const auto* real = std::get_if<double>(&arg->value)) return *real;
  if (const auto* integer = std::get_if<std::int64_t>(&arg->value)) return static_cast<double>(*integer);
  return std::nullopt;
}

/// The argument `from` of `node` (which must have it), named `to` (or `from` again): for a
/// rewrite that hands an argument on to the op replacing the node.
inline Argument copy_arg(const Node& node, const char* from, const char* to = nullptr) {
  return Argument{to ? to : from, node.arg(from)->value};
}

/// Whether the argument `name` of `node` is the constant true (false when absent or not a bool).
inline bool flag_arg(const Node& node, const std::string& name) {
  const auto* arg = node.arg(name);
  const auto* value = arg ? std::get_if<bool>(&arg->value) : nullptr;
  return value != nullptr && *value;
}

/// Whether `node` is a batch norm in inference: `aten::batch_norm` with training false, a constant
/// eps, and running statistics given, whose one result is the normalized input.
inline bool is_inference_batch_norm(const Node& node) {
  if (node.op != "aten::batch_norm" || node.outputs.size() != 1) return false;
  const auto* training = node.arg("training");
  const bool* flag = training ? std::get_if<bool>(&training->value) : nullptr;
  const auto* eps = node.arg("eps");
  return flag != nullptr && !*flag && eps != nullptr && std::holds_alternative<double>(eps->value) &&
         tensor_arg(node, "input") >= 0 && tensor_arg(node, "running_mean") >= 0 &&
         tensor_arg(node, "running_var") >= 0;
}

/// Whether `node` is `aten::to.dtype` on one device with no copy forced and the layout kept: a cast
/// and nothing else (an alias of its input when the dtype is the input's already).
inline bool is_plain_cast(const Node& node) {
  if (node.op != "aten::to" || node.overload != "dtype" || node.outputs.size() != 1) return false;
  if (tensor_arg(node, "self") < 0) return false;
  const auto* copy = node.arg("copy");
  const auto* format = node.arg("memory_format");
  const bool* forced = copy ? std::get_if<bool>(&copy->value) : nullptr;
  return forced != nullptr && !*forced && format != nullptr && std::holds_alternative<NoneArg>(format->value);
}

/// `aten::to.dtype` of value `self` to `dtype`, a plain cast (is_plain_cast), without its result:
/// the caller sets `outputs`.
inline Node plain_cast(int self, c10::ScalarType dtype) {
  Node cast;
  cast.op = "aten::to";
  cast.overload = "dtype";
  cast.args = {{"self", ValueRef{self}},
               {"dtype", static_cast<std::int64_t>(dtype)},
               {"non_blocking", false},
               {"copy", false},
               {"memory_format", NoneArg{}}};
  return cast;
}

}  // namespace zenith::ir
