#include "core/aten_call.h"

#include <fmt/format.h>

#include "core/attention_operand_alignment.h"
#include "core/op_schema.h"
#include "zenith/error.h"

namespace zenith::ir {
namespace {

struct Boxer {
  c10::IValue operator()(const NoneArg&) const { return {}; }
  c10::IValue operator()(bool v) const { return v; }
  c10::IValue operator()(std::int64_t v) const { return v; }
  c10::IValue operator()(double v) const { return v; }
  c10::IValue operator()(const std::string& v) const { return v; }
  c10::IValue operator()(const std::vector<std::int64_t>& v) const { return v; }
  c10::IValue operator()(const std::vector<double>& v) const { return v; }
  c10::IValue operator()(const std::vector<bool>& v) const {
    c10::List<bool> list;
    for (bool b : v) list.push_back(b);
    return list;
  }
  c10::IValue operator()(const c10::Device& v) const { return v; }
  c10::IValue operator()(const ValueRef&) const { return {}; }
  c10::IValue operator()(const ValueListRef&) const { return {}; }
};

// The tracer records an undefined tensor as None; an op whose schema takes a plain Tensor there
// (the fused attention backwards' absent bias and sequence lengths) is handed the undefined tensor.
bool is_plain_tensor(const c10::Argument& argument) { return argument.type()->kind() == c10::TypeKind::TensorType; }

bool is_optional_tensor_list(const c10::Argument& argument) {
  auto list = argument.type()->castRaw<c10::ListType>();
  return list != nullptr && list->getElementType()->kind() == c10::TypeKind::OptionalType;
}

}  // namespace

c10::IValue box_constant(const ArgValue& value) { return std::visit(Boxer{}, value); }

AtenCall::AtenCall(const Node& node) : node_(node) {
  auto handle = c10::Dispatcher::singleton().findSchema({node.op, node.overload});
  if (!handle) {
    throw Error(fmt::format("no ATen operator is registered as '{}'", node.qualified_name()));
  }
  op_ = *handle;
  const auto& arguments = op_->schema().arguments();
  if (arguments.size() != node.args.size()) {
    throw Error::mismatch(fmt::format("node {} arguments", node.qualified_name()),
                          fmt::format("{} (its schema: {})", arguments.size(), toString(op_->schema())),
                          std::to_string(node.args.size()),
                          "The graph was written for another LibTorch version or is corrupt.");
  }
  for (std::size_t i = 0; i < arguments.size(); ++i) {
    const bool undefined_tensor = std::holds_alternative<NoneArg>(node.args[i].value) && is_plain_tensor(arguments[i]);
    constants_.push_back(undefined_tensor ? c10::IValue(at::Tensor()) : box_constant(node.args[i].value));
    optional_tensor_list_.push_back(is_optional_tensor_list(arguments[i]));
  }
  aligns_operands_ = reads_attention_operands_aligned(op_->schema());
}

std::vector<at::Tensor> AtenCall::run(const std::function<const at::Tensor&(int)>& value_of) const {
  torch::jit::Stack stack;
  stack.reserve(node_.args.size());
  for (std::size_t i = 0; i < node_.args.size(); ++i) {
    const auto& value = node_.args[i].value;
    if (const auto* ref = std::get_if<ValueRef>(&value)) {
      stack.emplace_back(value_of(ref->id));
    } else if (const auto* list = std::get_if<ValueListRef>(&value)) {
      if (optional_tensor_list_[i]) {
        c10::List<std::optional<at::Tensor>> tensors;
        for (const auto& id : list->ids) tensors.push_back(id ? std::optional<at::Tensor>(value_of(*id)) : std::nullopt);
        stack.emplace_back(std::move(tensors));
      } else {
        std::vector<at::Tensor> tensors;
        tensors.reserve(list->ids.size());
        for (const auto& id : list->ids) tensors.push_back(value_of(id.value_or(-1)));
        stack.emplace_back(std::move(tensors));
      }
    } else {
      stack.push_back(constants_[i]);
    }
  }
  if (aligns_operands_) align_attention_operands(stack);
  op_->callBoxed(stack);
  std::vector<at::Tensor> results;
  if (node_.list_output) {
    results = stack.at(0).toTensorVector();
  } else {
    for (auto& item : stack) results.push_back(item.isTensor() ? item.toTensor() : at::Tensor());
  }
  if (results.size() != node_.outputs.size()) {
    throw Error::mismatch(fmt::format("results of {}", node_.qualified_name()),
                          std::to_string(node_.outputs.size()), std::to_string(results.size()));
  }
  return results;
}

}  // namespace zenith::ir
