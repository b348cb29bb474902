#include "passes/autodiff/derivative_rules.h"

#include <map>
#include <set>

#include <fmt/format.h>

#include "zenith/error.h"

namespace zenith::autodiff {
namespace {

using Registry = std::map<std::string, DerivativeRule>;

const Registry& registry() {
  static const Registry rules = [] {
    Registry all;
    auto add = [&all](const std::string& name, DerivativeRule rule) { all.emplace(name, std::move(rule)); };
    register_elementwise_rules(add);
    register_matrix_rules(add);
    register_shape_rules(add);
    register_reduction_rules(add);
    register_nn_rules(add);
    register_attention_rules(add);
    return all;
  }();
  return rules;
}

}  // namespace

RuleCall::RuleCall(const ir::Node& node, std::function<const at::Tensor&(int)> value_of,
                   std::vector<at::Tensor> grad_outputs, OpRunner run_op)
    : node_(node), value_of_(std::move(value_of)), grads_(std::move(grad_outputs)), run_op_(std::move(run_op)) {}

const ir::Argument& RuleCall::argument(const char* name) const {
  const auto* arg = node_.arg(name);
  if (arg == nullptr) {
    throw Error(fmt::format("derivative of {}: the node has no argument '{}' (another LibTorch version?)",
                            node_.qualified_name(), name));
  }
  return *arg;
}

const at::Tensor& RuleCall::input(const char* name) const {
  int id = input_id(name);
  if (id < 0) {
    throw Error(fmt::format("derivative of {}: argument '{}' holds no tensor", node_.qualified_name(), name));
  }
  return value_of_(id);
}

int RuleCall::input_id(const char* name) const {
  const auto* ref = std::get_if<ir::ValueRef>(&argument(name).value);
  return ref ? ref->id : -1;
}

std::vector<at::Tensor> RuleCall::inputs(const char* name) const {
  const auto* list = std::get_if<ir::ValueListRef>(&argument(name).value);
  if (list == nullptr) {
    throw Error(fmt::format("derivative of {}: argument '{}' is not a tensor list", node_.qualified_name(), name));
  }
  std::vector<at::Tensor> tensors;
  for (const auto& id : list->ids) tensors.push_back(id ? value_of_(*id) : at::Tensor());
  return tensors;
}

const at::Tensor& RuleCall::output(std::size_t k) const { return value_of_(node_.outputs.at(k)); }

std::int64_t RuleCall::integer(const char* name) const {
  const auto& value = argument(name).value;
  if (const auto* v = std::get_if<std::int64_t>(&value)) return *v;
  if (const auto* v = std::get_if<bool>(&value)) return *v;
  throw Error(fmt::format("derivative of {}: argument '{}' is not a constant integer", node_.qualified_name(), name));
}

double RuleCall::real(const char* name) const {
  const auto& value = argument(name).value;
  if (const auto* v = std::get_if<double>(&value)) return *v;
  if (const auto* v = std::get_if<std::int64_t>(&value)) return static_cast<double>(*v);
  throw Error(fmt::format("derivative of {}: argument '{}' is not a constant number", node_.qualified_name(), name));
}

bool RuleCall::flag(const char* name) const {
  const auto& value = argument(name).value;
  if (const auto* v = std::get_if<bool>(&value)) return *v;
  throw Error(fmt::format("derivative of {}: argument '{}' is not a constant bool", node_.qualified_name(), name));
}

std::vector<std::int64_t> RuleCall::integers(const char* name) const {
  const auto& value = argument(name).value;
  if (const auto* v = std::get_if<std::vector<std::int64_t>>(&value)) return *v;
  if (const auto* v = std::get_if<std::int64_t>(&value)) return {*v};
  throw Error(fmt::format("derivative of {}: argument '{}' is not a constant integer list", node_.qualified_name(),
                          name));
}

std::string RuleCall::text(const char* name) const {
  if (const auto* v = std::get_if<std::string>(&argument(name).value)) return *v;
  throw Error(fmt::format("derivative of {}: argument '{}' is not a constant string", node_.qualified_name(), name));
}

bool RuleCall::is_none(const char* name) const {
  return std::holds_alternative<ir::NoneArg>(argument(name).value);
}

at::Scalar RuleCall::scalar(const char* name) const {
  const auto& value = argument(name).value;
  if (const auto* v = std::get_if<double>(&value)) return *v;
  if (const auto* v = std::get_if<std::int64_t>(&value)) return *v;
  if (const auto* v = std::get_if<bool>(&value)) return *v;
  throw Error(fmt::format("derivative of {}: argument '{}' is not a constant scalar", node_.qualified_name(), name));
}

const DerivativeRule* find_derivative_rule(const ir::Node& node) {
  const auto& rules = registry();
  auto it = rules.find(node.qualified_name());
  return it == rules.end() ? nullptr : &it->second;
}

bool blocks_gradient(const ir::Node& node) {
  // Results that depend on an input's sizes, dtype or device only, or are piecewise constant.
  static const std::set<std::string> ops = {
      "aten::zeros_like", "aten::ones_like",  "aten::empty_like", "aten::full_like", "aten::rand_like",
      "aten::randn_like", "aten::detach",     "aten::sign",       "aten::floor",     "aten::ceil",
      "aten::round",      "aten::bernoulli",  "aten::argmax",     "aten::argmin",    "aten::size",
      "aten::new_zeros",  "aten::new_ones",   "aten::new_empty",  "aten::new_full",  "aten::trunc"};
  return ops.count(node.op) > 0;
}

std::vector<std::string> differentiable_ops() {
  std::vector<std::string> names;
  for (const auto& item : registry()) names.push_back(item.first);
  return names;
}

}  // namespace zenith::autodiff
