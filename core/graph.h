// The Zenith IR: a Graph of Nodes over SSA tensor Values, in topological order.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "core/argument.h"
#include "core/tensor_type.h"

namespace zenith::ir {

/// Where a value comes from.
enum class ValueRole {
  Input,         ///< a tensor argument of the call
  Parameter,     ///< a parameter or buffer of the module, bound live at every call
  Constant,      ///< a tensor fixed at capture (Graph::constants holds it)
  Intermediate,  ///< produced by a node
};

const char* role_name(ValueRole role);
ValueRole role_from_name(const std::string& name);

/// One SSA tensor value.
struct Value {
  int id = -1;
  TensorType type;
  ValueRole role = ValueRole::Intermediate;
  /// Parameter qualified name, argument name, or empty.
  std::string name;
};

/// One operator application.
struct Node {
  /// Operator name with namespace, e.g. "aten::addmm".
  std::string op;
  /// Schema overload name, e.g. "Tensor", or empty.
  std::string overload;
  /// One per schema argument, in schema order.
  std::vector<Argument> args;
  /// Result value ids.
  std::vector<int> outputs;
  /// The operator returns Tensor[]; `outputs` are its elements.
  bool list_output = false;
  /// The fusion group the fusion pass put this node in, or -1. Nodes sharing a group are offered
  /// to backends as one kernel.
  int fusion_group = -1;
  /// Dynamic shapes: an integer argument depends on a symbolic dimension (it differed between
  /// captures at different sizes). Such a node runs at every call: constant folding leaves it.
  bool size_dependent = false;
  /// Reads parameters and buffers alone, yet runs at every call: its result is too large to keep
  /// between calls (a convolution's weight folded with its batch norm where the plan keeps no copy
  /// of it, passes/convolution_epilogue.h). Derived values (runtime/derived_values.h) and constant
  /// folding leave it.
  bool per_call = false;

  /// Rewrites every tensor value id this node reads through `rename`.
  void rename_inputs(const std::function<int(int)>& rename);
  /// "aten::add.Tensor" (or "aten::relu" without an overload).
  std::string qualified_name() const;
  /// Tensor value ids read, in argument order, with repeats.
  std::vector<int> input_ids() const;
  /// The argument named `name`, or nullptr.
  const Argument* arg(const std::string& name) const;
};

/// How the flat graph outputs are put back together into what forward returned.
struct OutputStructure {
  enum class Kind { Tensor, Tuple, List, Dict, Constant };
  Kind kind = Kind::Tensor;
  /// Kind::Tensor: the index into Graph::outputs.
  int index = 0;
  /// Kind::Tuple / Kind::List / Kind::Dict: the elements (a dict's values, in insertion order).
  std::vector<OutputStructure> elements;
  /// Kind::Dict: one string key per element (Hugging Face models return dicts).
  std::vector<std::string> keys;
  /// Kind::Constant: a value forward returned that no tensor computes (None, a bool, an int, a
  /// double or a string); returned as it is at every call.
  ArgValue constant = NoneArg{};

  bool operator==(const OutputStructure& other) const {
    return kind == other.kind && index == other.index && elements == other.elements && keys == other.keys &&
           constant == other.constant;
  }
};

/// A graph (a whole captured forward) or a group (the nodes one backend runs).
struct Graph {
  /// Values by id: values[i].id == i. Ids of removed values stay unused.
  std::vector<std::optional<Value>> values;
  /// Nodes in topological order.
  std::vector<Node> nodes;
  /// Value ids bound at a call: call inputs and parameters, in order.
  std::vector<int> inputs;
  /// Value ids returned, in order.
  std::vector<int> outputs;
  /// How outputs nest (tuples, lists).
  OutputStructure output_structure;
  /// Data of Constant values, by id.
  std::map<int, at::Tensor> constants;
  /// Groups only: per output, the index into `inputs` whose memory it is (in-place), or -1.
  std::vector<int> output_aliases;

  /// Adds a value and returns its id.
  int add_value(TensorType type, ValueRole role, std::string name = "");
  /// The value with `id`; throws zenith::Error when there is none.
  const Value& value(int id) const;
  Value& value(int id);
  bool has_value(int id) const;
  /// Number of live values.
  std::size_t value_count() const;
  /// For each value id: the index of the node producing it, or -1 (inputs, constants).
  std::vector<int> producers() const;
  /// For each value id: indices of the nodes reading it.
  std::vector<std::vector<int>> consumers() const;
  /// Makes every node argument and graph output that reads `from` read `to` instead.
  void replace_uses(int from, int to);
  /// Drops values no node, input or output mentions (constants included).
  void remove_unused_values();
};

}  // namespace zenith::ir
