#include "capture/torchscript_import.h"

#include <algorithm>
#include <unordered_map>
#include <variant>

#include <fmt/format.h>
#include <torch/csrc/jit/ir/constants.h>

#include "core/tensor_type.h"
#include "zenith/error.h"

namespace zenith::capture {
namespace {

using torch::jit::Node;
using torch::jit::Value;

// What a TorchScript value became on the Zenith side.
struct TensorSlot { int id; };
struct ConstantSlot { ir::ArgValue value; };
struct ListSlot { std::vector<std::optional<int>> ids; };
struct PendingListSlot { std::size_t node_index; };  // a Tensor[] result not yet unpacked
struct TupleSlot;
struct DictSlot;
using Slot = std::variant<TensorSlot, ConstantSlot, ListSlot, PendingListSlot, std::shared_ptr<TupleSlot>,
                          std::shared_ptr<DictSlot>>;
struct TupleSlot { std::vector<Slot> elements; };
struct DictSlot {  // string keys, in insertion order
  std::vector<std::string> keys;
  std::vector<Slot> values;
};

std::string where(const Node* node) {
  std::ostringstream text;
  text << *node;
  std::string line = text.str();
  if (!line.empty() && line.back() == '\n') line.pop_back();
  return line;
}

ir::TensorType tensor_type(const Value* value, const Node* node) {
  auto type = value->type()->cast<c10::TensorType>();
  auto sizes = type ? type->sizes().concrete_sizes() : std::nullopt;
  auto strides = type ? type->strides().concrete_sizes() : std::nullopt;
  if (!type || !type->scalarType() || !sizes || !strides || !type->device()) {
    throw Error(fmt::format("capture: the tracer left an incomplete tensor type for %{} in `{}`", value->debugName(),
                            node ? where(node) : std::string("a graph input")));
  }
  ir::TensorType result;
  result.dtype = *type->scalarType();
  result.sizes = *sizes;
  result.strides = *strides;
  result.device = *type->device();
  result.requires_grad = type->requiresGrad().value_or(false);
  return result;
}

bool complete_tensor_type(const Value* value) {
  auto type = value->type()->cast<c10::TensorType>();
  return type && type->scalarType() && type->sizes().concrete_sizes() && type->strides().concrete_sizes() &&
         type->device();
}

// The type of a result nothing reads and the tracer could not type: an undefined tensor, an optional
// result the op did not compute (attention weights nobody asked for). An empty tensor on the op's
// device, which nothing reads and the dispatcher plugins leave alone.
ir::TensorType unread_result_type(const Node* node) {
  ir::TensorType type;
  type.dtype = at::kFloat;
  type.sizes = {0};
  type.strides = {1};
  type.device = at::Device(at::kCPU);
  for (const Value* input : node->inputs()) {
    auto input_type = input->type()->cast<c10::TensorType>();
    if (input_type && input_type->device()) {
      type.device = *input_type->device();
      break;
    }
  }
  return type;
}

std::optional<ir::ArgValue> constant_arg(const c10::IValue& value) {
  if (value.isNone()) return ir::NoneArg{};
  if (value.isBool()) return value.toBool();
  if (value.isInt()) return value.toInt();
  if (value.isDouble()) return value.toDouble();
  if (value.isString()) return value.toStringRef();
  if (value.isDevice()) return value.toDevice();
  if (value.isIntList()) return value.toIntVector();
  if (value.isDoubleList()) return value.toDoubleVector();
  if (value.isBoolList()) {
    std::vector<bool> bools;
    for (bool b : value.toBoolList()) bools.push_back(b);
    return bools;
  }
  return std::nullopt;
}

class Importer {
 public:
  explicit Importer(const std::vector<InputBinding>& bindings) : bindings_(bindings) {}

  ir::Graph run(const torch::jit::Graph& source, std::size_t unstructured) {
    if (source.inputs().size() != bindings_.size()) {
      throw Error::mismatch("capture: traced graph inputs", std::to_string(bindings_.size()),
                            std::to_string(source.inputs().size()));
    }
    for (std::size_t i = 0; i < source.inputs().size(); ++i) {
      const Value* input = source.inputs()[i];
      int id = graph_.add_value(tensor_type(input, nullptr), bindings_[i].role, bindings_[i].name);
      graph_.inputs.push_back(id);
      slots_[input] = TensorSlot{id};
    }
    for (const Node* node : source.nodes()) import_node(node);
    import_outputs(source, unstructured);
    return std::move(graph_);
  }

 private:
  const Slot& slot(const Value* value, const Node* user) {
    auto it = slots_.find(value);
    if (it == slots_.end()) {
      throw Error(fmt::format("capture: %{} used by `{}` was never defined", value->debugName(), where(user)));
    }
    return it->second;
  }

  void import_node(const Node* node) {
    auto kind = node->kind();
    if (kind == c10::prim::Constant) return import_constant(node);
    if (kind == c10::prim::ListConstruct) return import_list(node);
    if (kind == c10::prim::ListUnpack) return import_list_unpack(node);
    if (kind == c10::prim::TupleConstruct) return import_tuple(node);
    if (kind == c10::prim::TupleUnpack) return import_tuple_unpack(node);
    if (kind == c10::prim::TupleIndex) return import_index(node);
    if (kind == c10::prim::DictConstruct) return import_dict(node);
    if (kind == c10::aten::__getitem__) return import_index(node);
    if (kind == c10::prim::AutogradZero) {  // an undefined tensor (the backward capture records one so)
      slots_[node->output()] = ConstantSlot{ir::NoneArg{}};
      return;
    }
    if (node->maybeSchema() == nullptr) {
      throw Error(fmt::format(
          "capture: `{}` is not an ATen operator with a schema; Zenith cannot compile it (it runs eagerly)", where(node)));
    }
    import_op(node);
  }

  void import_constant(const Node* node) {
    const Value* out = node->output();
    auto value = torch::jit::toIValue(out);
    if (!value) throw Error(fmt::format("capture: cannot read the constant `{}`", where(node)));
    if (value->isTensor()) {
      auto tensor = value->toTensor();
      int id = graph_.add_value(type_of(tensor), ir::ValueRole::Constant);
      graph_.value(id).type.requires_grad = false;
      graph_.constants[id] = tensor;
      slots_[out] = TensorSlot{id};
      return;
    }
    auto arg = constant_arg(*value);
    if (!arg) throw Error(fmt::format("capture: unsupported constant `{}`", where(node)));
    slots_[out] = ConstantSlot{*arg};
  }

  void import_list(const Node* node) {
    std::vector<const Slot*> elements;
    for (const Value* input : node->inputs()) elements.push_back(&slot(input, node));
    bool all_constant = true, all_tensor_or_none = true;
    for (const Slot* element : elements) {
      const auto* constant = std::get_if<ConstantSlot>(element);
      all_constant &= constant != nullptr;
      all_tensor_or_none &= std::holds_alternative<TensorSlot>(*element) ||
                            (constant && std::holds_alternative<ir::NoneArg>(constant->value));
    }
    auto element_kind = node->output()->type()->castRaw<c10::ListType>()->getElementType()->kind();
    bool tensor_list = element_kind == c10::TypeKind::TensorType || element_kind == c10::TypeKind::OptionalType;
    if (tensor_list && all_tensor_or_none) {
      ListSlot list;
      for (const Slot* element : elements) {
        if (const auto* tensor = std::get_if<TensorSlot>(element)) list.ids.emplace_back(tensor->id);
        else list.ids.emplace_back(std::nullopt);
      }
      slots_[node->output()] = list;
      return;
    }
    if (all_constant) {
      slots_[node->output()] = ConstantSlot{constant_list(elements, element_kind, node)};
      return;
    }
    const bool nested = std::any_of(elements.begin(), elements.end(), [](const Slot* element) {
      return std::holds_alternative<ListSlot>(*element) || std::holds_alternative<std::shared_ptr<TupleSlot>>(*element) ||
             std::holds_alternative<std::shared_ptr<DictSlot>>(*element);
    });
    if (nested) {
      throw Error(fmt::format("capture: the list `{}` holds lists, tuples or dicts; Zenith holds lists of tensors or "
                              "of constants (return a tuple of lists instead)",
                              where(node)));
    }
    throw Error(fmt::format("capture: the list `{}` mixes values computed at run time; Zenith needs constant "
                            "scalars or tensors",
                            where(node)));
  }

  ir::ArgValue constant_list(const std::vector<const Slot*>& elements, c10::TypeKind kind, const Node* node) {
    auto item = [&](std::size_t i) -> const ir::ArgValue& { return std::get<ConstantSlot>(*elements[i]).value; };
    if (kind == c10::TypeKind::IntType || kind == c10::TypeKind::SymIntType) {
      std::vector<std::int64_t> ints;
      for (std::size_t i = 0; i < elements.size(); ++i) ints.push_back(std::get<std::int64_t>(item(i)));
      return ints;
    }
    if (kind == c10::TypeKind::FloatType) {
      std::vector<double> doubles;
      for (std::size_t i = 0; i < elements.size(); ++i) doubles.push_back(std::get<double>(item(i)));
      return doubles;
    }
    if (kind == c10::TypeKind::BoolType) {
      std::vector<bool> bools;
      for (std::size_t i = 0; i < elements.size(); ++i) bools.push_back(std::get<bool>(item(i)));
      return bools;
    }
    throw Error(fmt::format("capture: unsupported constant list `{}`", where(node)));
  }

  void import_list_unpack(const Node* node) {
    const Slot& source = slot(node->input(), node);
    if (const auto* pending = std::get_if<PendingListSlot>(&source)) {
      auto& producer = graph_.nodes[pending->node_index];
      for (const Value* out : node->outputs()) {
        int id = graph_.add_value(tensor_type(out, node), ir::ValueRole::Intermediate);
        producer.outputs.push_back(id);
        slots_[out] = TensorSlot{id};
      }
      producer.list_output = true;
      return;
    }
    if (const auto* list = std::get_if<ListSlot>(&source)) {
      for (std::size_t i = 0; i < node->outputs().size(); ++i) {
        if (!list->ids.at(i)) throw Error(fmt::format("capture: `{}` unpacks a None", where(node)));
        slots_[node->outputs()[i]] = TensorSlot{*list->ids[i]};
      }
      return;
    }
    throw Error(fmt::format("capture: `{}` unpacks something that is not a tensor list", where(node)));
  }

  void import_tuple(const Node* node) {
    auto tuple = std::make_shared<TupleSlot>();
    for (const Value* input : node->inputs()) tuple->elements.push_back(slot(input, node));
    slots_[node->output()] = tuple;
  }

  void import_tuple_unpack(const Node* node) {
    const auto* tuple = std::get_if<std::shared_ptr<TupleSlot>>(&slot(node->input(), node));
    if (!tuple) throw Error(fmt::format("capture: `{}` unpacks something that is not a tuple", where(node)));
    for (std::size_t i = 0; i < node->outputs().size(); ++i) slots_[node->outputs()[i]] = (*tuple)->elements.at(i);
  }

  void import_dict(const Node* node) {
    auto dict = std::make_shared<DictSlot>();
    for (std::size_t i = 0; i + 1 < node->inputs().size(); i += 2) {
      const auto* key = std::get_if<ConstantSlot>(&slot(node->inputs()[i], node));
      const auto* text = key ? std::get_if<std::string>(&key->value) : nullptr;
      if (!text) {
        throw Error(fmt::format("capture: the dict `{}` has a key that is not a constant string; Zenith holds dicts "
                                "with string keys (as Hugging Face models return)",
                                where(node)));
      }
      dict->keys.push_back(*text);
      dict->values.push_back(slot(node->inputs()[i + 1], node));
    }
    slots_[node->output()] = dict;
  }

  // `aten::__getitem__` and `prim::TupleIndex` on a tuple, a tensor list or a dict, with a constant
  // index or key. On anything else (a list of sizes, say) it is an ordinary op.
  void import_index(const Node* node) {
    const Slot& container = slot(node->inputs()[0], node);
    const auto* index = std::get_if<ConstantSlot>(&slot(node->inputs()[1], node));
    auto fail = [&](const std::string& why) {
      throw Error(fmt::format("capture: `{}` {}; Zenith indexes tuples, lists and dicts with constants", where(node), why));
    };
    if (!index) fail("takes an index computed at run time");
    if (const auto* dict = std::get_if<std::shared_ptr<DictSlot>>(&container)) {
      const auto* key = std::get_if<std::string>(&index->value);
      if (!key) fail("indexes a dict with a key that is not a string");
      auto found = std::find((*dict)->keys.begin(), (*dict)->keys.end(), *key);
      if (found == (*dict)->keys.end()) fail("reads the key '" + *key + "', which the dict does not hold");
      slots_[node->output()] = (*dict)->values[found - (*dict)->keys.begin()];
      return;
    }
    const auto* position = std::get_if<std::int64_t>(&index->value);
    if (!position) fail("indexes with something that is not an integer");
    auto element = [&](std::size_t size) {
      std::int64_t at = *position < 0 ? *position + static_cast<std::int64_t>(size) : *position;
      if (at < 0 || at >= static_cast<std::int64_t>(size)) {
        fail(fmt::format("reads element {} of {}", *position, size));
      }
      return static_cast<std::size_t>(at);
    };
    if (const auto* tuple = std::get_if<std::shared_ptr<TupleSlot>>(&container)) {
      slots_[node->output()] = (*tuple)->elements[element((*tuple)->elements.size())];
      return;
    }
    if (const auto* list = std::get_if<ListSlot>(&container)) {
      const auto& id = list->ids[element(list->ids.size())];
      if (id) slots_[node->output()] = TensorSlot{*id};
      else slots_[node->output()] = ConstantSlot{ir::NoneArg{}};
      return;
    }
    if (node->kind() == c10::aten::__getitem__ && node->maybeSchema() != nullptr) return import_op(node);
    fail("indexes something that is neither a tuple, a tensor list nor a dict");
  }

  ir::ArgValue argument(const Value* value, const Node* node) {
    const Slot& s = slot(value, node);
    if (const auto* tensor = std::get_if<TensorSlot>(&s)) return ir::ValueRef{tensor->id};
    if (const auto* constant = std::get_if<ConstantSlot>(&s)) return constant->value;
    if (const auto* list = std::get_if<ListSlot>(&s)) return ir::ValueListRef{list->ids};
    throw Error(fmt::format("capture: `{}` takes %{}, a tensor list Zenith has not unpacked; write the op so that "
                            "the list is indexed first",
                            where(node), value->debugName()));
  }

  void import_op(const Node* node) {
    const auto& schema = node->schema();
    ir::Node out;
    out.op = schema.name();
    out.overload = schema.overload_name();
    if (node->inputs().size() != schema.arguments().size()) {
      throw Error(fmt::format("capture: `{}` has {} inputs but its schema {} arguments", where(node),
                              node->inputs().size(), schema.arguments().size()));
    }
    for (std::size_t i = 0; i < node->inputs().size(); ++i) {
      out.args.push_back(ir::Argument{schema.arguments()[i].name(), argument(node->inputs()[i], node)});
    }
    std::size_t index = graph_.nodes.size();
    for (const Value* result : node->outputs()) {
      auto kind = result->type()->kind();
      if (kind == c10::TypeKind::TensorType) {
        const bool unread = result->uses().empty() && !complete_tensor_type(result);
        int id = graph_.add_value(unread ? unread_result_type(node) : tensor_type(result, node),
                                  ir::ValueRole::Intermediate);
        out.outputs.push_back(id);
        slots_[result] = TensorSlot{id};
      } else if (kind == c10::TypeKind::ListType && node->outputs().size() == 1) {
        slots_[result] = PendingListSlot{index};
      } else if (result->uses().empty()) {
        throw Error(fmt::format("capture: `{}` returns a {} Zenith cannot hold", where(node), result->type()->str()));
      } else {
        throw Error(fmt::format("capture: `{}` computes a {} at run time; Zenith captures tensors only (a size read "
                                "inside forward with a tensor op, for example)",
                                where(node), result->type()->str()));
      }
    }
    graph_.nodes.push_back(std::move(out));
  }

  void flatten_elements(const std::vector<Slot>& elements, ir::OutputStructure& structure) {
    for (const auto& element : elements) {
      structure.elements.emplace_back();
      flatten_output(element, structure.elements.back());
    }
  }

  void flatten_output(const Slot& s, ir::OutputStructure& structure) {
    if (const auto* tensor = std::get_if<TensorSlot>(&s)) {
      structure.kind = ir::OutputStructure::Kind::Tensor;
      structure.index = static_cast<int>(graph_.outputs.size());
      graph_.outputs.push_back(tensor->id);
      return;
    }
    if (const auto* tuple = std::get_if<std::shared_ptr<TupleSlot>>(&s)) {
      structure.kind = ir::OutputStructure::Kind::Tuple;
      flatten_elements((*tuple)->elements, structure);
      return;
    }
    if (const auto* list = std::get_if<ListSlot>(&s)) {
      structure.kind = ir::OutputStructure::Kind::List;
      for (const auto& id : list->ids) {
        if (!id) throw Error("capture: forward returns a list holding None");
        structure.elements.emplace_back();
        flatten_output(TensorSlot{*id}, structure.elements.back());
      }
      return;
    }
    if (const auto* dict = std::get_if<std::shared_ptr<DictSlot>>(&s)) {
      structure.kind = ir::OutputStructure::Kind::Dict;
      structure.keys = (*dict)->keys;
      flatten_elements((*dict)->values, structure);
      return;
    }
    if (const auto* constant = std::get_if<ConstantSlot>(&s)) {
      structure.kind = ir::OutputStructure::Kind::Constant;
      structure.constant = constant->value;
      return;
    }
    throw Error("capture: forward returns something Zenith cannot hold (a tensor list it has not unpacked); "
                "Zenith returns tensors, constants, and tuples, lists and string-keyed dicts of them");
  }

  void import_outputs(const torch::jit::Graph& source, std::size_t unstructured) {
    const auto outputs = source.outputs();
    const std::size_t structured = outputs.size() - unstructured;
    std::vector<Slot> returned;
    for (std::size_t i = 0; i < structured; ++i) returned.push_back(slot(outputs[i], source.return_node()));
    if (structured == 1) {
      flatten_output(returned[0], graph_.output_structure);
    } else {
      graph_.output_structure.kind = ir::OutputStructure::Kind::Tuple;
      flatten_elements(returned, graph_.output_structure);
    }
    for (std::size_t i = structured; i < outputs.size(); ++i) {
      const auto* tensor = std::get_if<TensorSlot>(&slot(outputs[i], source.return_node()));
      if (tensor == nullptr) throw Error(fmt::format("capture: guarded value %{} is not a tensor", outputs[i]->debugName()));
      graph_.outputs.push_back(tensor->id);
    }
  }

  const std::vector<InputBinding>& bindings_;
  ir::Graph graph_;
  std::unordered_map<const Value*, Slot> slots_;
};

}  // namespace

ir::Graph import_torchscript(const std::shared_ptr<torch::jit::Graph>& graph, const std::vector<InputBinding>& inputs,
                             std::size_t unstructured_outputs) {
  if (unstructured_outputs >= graph->outputs().size()) {
    throw Error::mismatch("capture: outputs of the traced graph", fmt::format("more than {}", unstructured_outputs),
                          std::to_string(graph->outputs().size()));
  }
  return Importer(inputs).run(*graph, unstructured_outputs);
}

}  // namespace zenith::capture
