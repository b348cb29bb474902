// Derivative rules: for each differentiable ATen op, how the gradients of its inputs follow from the
// gradients of its outputs. A rule is ATen C++ code over tensors; the backward capture
// (capture/backward_capture.h) runs the rules under the tracer, so the backward becomes IR like any
// forward and is optimized, fused and compiled the same way.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include "core/graph.h"

namespace zenith::autodiff {

/// Runs an ATen op boxed and returns its tensor results; the backward capture supplies one that
/// also records the op, for ops the LibTorch tracer cannot record itself (those taking a
/// `bool[3] output_mask`).
using OpRunner = std::function<std::vector<at::Tensor>(const std::string& op, const std::string& overload,
                                                       std::vector<c10::IValue> args)>;

/// What a rule sees of one forward node.
class RuleCall {
 public:
  RuleCall(const ir::Node& node, std::function<const at::Tensor&(int)> value_of, std::vector<at::Tensor> grad_outputs,
           OpRunner run_op);

  /// Runs `op` through the OpRunner (see there).
  std::vector<at::Tensor> run(const std::string& op, const std::string& overload, std::vector<c10::IValue> args) const {
    return run_op_(op, overload, std::move(args));
  }

  const ir::Node& node() const { return node_; }
  /// The tensor of the forward value that argument `name` reads.
  const at::Tensor& input(const char* name) const;
  /// The value id argument `name` reads, or -1 when it holds no tensor (None, a constant).
  int input_id(const char* name) const;
  /// The tensors of a Tensor[] argument.
  std::vector<at::Tensor> inputs(const char* name) const;
  /// The node's k-th result (forward value).
  const at::Tensor& output(std::size_t k = 0) const;
  /// The gradient flowing into the node's k-th result: undefined when none reaches it.
  const at::Tensor& grad(std::size_t k = 0) const { return grads_.at(k); }

  /// Constant arguments; each throws zenith::Error when the argument has another kind.
  std::int64_t integer(const char* name) const;
  double real(const char* name) const;  // integers are widened
  bool flag(const char* name) const;
  std::vector<std::int64_t> integers(const char* name) const;
  std::string text(const char* name) const;  // a str argument (einsum's equation)
  bool is_none(const char* name) const;
  /// A scalar argument as ATen sees it (an integer stays an integer).
  at::Scalar scalar(const char* name) const;

 private:
  const ir::Argument& argument(const char* name) const;

  const ir::Node& node_;
  std::function<const at::Tensor&(int)> value_of_;
  std::vector<at::Tensor> grads_;
  OpRunner run_op_;
};

/// Where a rule writes the gradients it computes.
class GradientSink {
 public:
  /// Adds `gradient` to the gradient of the value argument `name` reads (ignored when that argument
  /// reads no value or the value needs no gradient). `gradient` may broadcast over the value:
  /// it is summed to the value's sizes and cast to its dtype.
  virtual void add(const RuleCall& call, const char* name, const at::Tensor& gradient) = 0;
  /// The same for the `index`-th element of a Tensor[] argument.
  virtual void add_element(const RuleCall& call, const char* name, std::size_t index, const at::Tensor& gradient) = 0;
  /// Whether the value argument `name` reads needs a gradient (rules skip work for those that do not).
  virtual bool wanted(const RuleCall& call, const char* name) const = 0;
  virtual ~GradientSink() = default;
};

/// A rule: reads the call, writes input gradients to the sink. Rules run only when at least one
/// result received a gradient.
using DerivativeRule = std::function<void(const RuleCall&, GradientSink&)>;

/// The rule for `node` ("aten::mul.Tensor"), or null when Zenith has none.
const DerivativeRule* find_derivative_rule(const ir::Node& node);

/// Ops whose results never carry a gradient whatever their inputs (`zeros_like`, comparisons'
/// dtype aside, sizes): no rule is needed and none flows through.
bool blocks_gradient(const ir::Node& node);

/// Every op with a rule, qualified ("aten::add.Tensor"), for docs and tests.
std::vector<std::string> differentiable_ops();

/// Registration, one per family file.
void register_elementwise_rules(std::function<void(const std::string&, DerivativeRule)> add);
void register_matrix_rules(std::function<void(const std::string&, DerivativeRule)> add);
void register_shape_rules(std::function<void(const std::string&, DerivativeRule)> add);
void register_reduction_rules(std::function<void(const std::string&, DerivativeRule)> add);
void register_nn_rules(std::function<void(const std::string&, DerivativeRule)> add);
void register_attention_rules(std::function<void(const std::string&, DerivativeRule)> add);

}  // namespace zenith::autodiff
