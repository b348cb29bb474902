// Running one IR node through the ATen dispatcher (boxed), as eager PyTorch would.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>

#include "core/graph.h"

namespace zenith::ir {

/// A constant argument (or a constant output) as the IValue a boxed kernel takes; None for
/// references to tensor values, which are bound at run time.
c10::IValue box_constant(const ArgValue& value);

/// A node bound to its operator, with its constant arguments already boxed. Cheap to run many times.
class AtenCall {
 public:
  /// Finds the operator and boxes the constants; throws zenith::Error when the op is unknown or
  /// an argument does not fit the schema.
  explicit AtenCall(const Node& node);

  /// Runs the op. `value_of(id)` gives the tensor of a value id. Returns one tensor per node output.
  std::vector<at::Tensor> run(const std::function<const at::Tensor&(int)>& value_of) const;

  const Node& node() const { return node_; }

 private:
  Node node_;
  std::optional<c10::OperatorHandle> op_;
  std::vector<c10::IValue> constants_;  // per argument; ignored where the argument reads values
  std::vector<bool> optional_tensor_list_;
  bool aligns_operands_ = false;  // core/attention_operand_alignment.h
};

}  // namespace zenith::ir
