#include "core/row_reduction.h"

#include <algorithm>
#include <map>
#include <set>

namespace zenith::ir {
namespace {

using Kind = RowReduction::Kind;

// The families by qualified name, and whether the op's dimensions are one int ("dim") rather
// than a list.
struct Family {
  Kind kind;
  bool normalization;
};

const std::map<std::string, Family>& families() {
  static const std::map<std::string, Family> table = {
      {"aten::sum", {Kind::Sum, false}},          {"aten::sum.dim_IntList", {Kind::Sum, false}},
      {"aten::mean", {Kind::Mean, false}},        {"aten::mean.dim", {Kind::Mean, false}},
      {"aten::amax", {Kind::Max, false}},         {"aten::amin", {Kind::Min, false}},
      {"aten::var", {Kind::Var, false}},          {"aten::var.dim", {Kind::Var, false}},
      {"aten::var.correction", {Kind::Var, false}}, {"aten::std", {Kind::Std, false}},
      {"aten::std.dim", {Kind::Std, false}},      {"aten::std.correction", {Kind::Std, false}},
      {"aten::softmax.int", {Kind::Softmax, true}}, {"aten::_softmax", {Kind::Softmax, true}},
      {"aten::log_softmax.int", {Kind::LogSoftmax, true}}, {"aten::_log_softmax", {Kind::LogSoftmax, true}},
      {"aten::layer_norm", {Kind::LayerNorm, true}},
  };
  return table;
}

const ArgValue* arg_value(const Node& node, const char* name) {
  const auto* a = node.arg(name);
  return a ? &a->value : nullptr;
}

// The reduced dimensions, normalized and sorted; nullopt when an argument is not a constant.
std::optional<std::set<int>> reduced_dims(const Node& node, const RowReduction& r) {
  std::set<int> dims;
  auto all = [&] {
    for (int d = 0; d < r.rank; ++d) dims.insert(d);
    return dims;
  };
  auto add = [&](std::int64_t d) {
    if (d < -r.rank || d >= r.rank) return false;
    dims.insert(static_cast<int>(d < 0 ? d + r.rank : d));
    return true;
  };
  if (r.kind == Kind::LayerNorm) {
    const auto* shape = std::get_if<std::vector<std::int64_t>>(arg_value(node, "normalized_shape"));
    if (shape == nullptr || shape->empty() || static_cast<int>(shape->size()) > r.rank) return std::nullopt;
    for (int d = r.rank - static_cast<int>(shape->size()); d < r.rank; ++d) dims.insert(d);
    return dims;
  }
  const ArgValue* dim = arg_value(node, "dim");
  if (dim == nullptr || std::holds_alternative<NoneArg>(*dim)) return all();
  if (const auto* one = std::get_if<std::int64_t>(dim)) return add(*one) ? std::optional(dims) : std::nullopt;
  const auto* list = std::get_if<std::vector<std::int64_t>>(dim);
  if (list == nullptr) return std::nullopt;
  if (list->empty()) return all();  // amax/amin/sum: an empty list reduces everything
  for (auto d : *list)
    if (!add(d)) return std::nullopt;
  return dims;
}

std::optional<double> correction_of(const Node& node) {
  const ArgValue* correction = arg_value(node, "correction");
  if (correction != nullptr && !std::holds_alternative<NoneArg>(*correction)) {
    if (const auto* i = std::get_if<std::int64_t>(correction)) return static_cast<double>(*i);
    if (const auto* d = std::get_if<double>(correction)) return *d;
    return std::nullopt;
  }
  const ArgValue* unbiased = arg_value(node, "unbiased");
  if (unbiased != nullptr) {
    const auto* b = std::get_if<bool>(unbiased);
    if (b == nullptr) return std::nullopt;
    return *b ? 1.0 : 0.0;
  }
  return 1.0;  // var.correction with correction=None is unbiased
}

}  // namespace

std::optional<RowReduction> row_reduction(const Graph& graph, const Node& node) {
  auto family = families().find(node.qualified_name());
  if (family == families().end() || node.outputs.size() != 1 || node.list_output) return std::nullopt;
  RowReduction r;
  r.kind = family->second.kind;
  const auto* input = std::get_if<ValueRef>(arg_value(node, r.kind == Kind::LayerNorm ? "input" : "self"));
  if (input == nullptr) return std::nullopt;
  r.input = input->id;
  r.rank = static_cast<int>(graph.value(r.input).type.rank());
  if (r.rank == 0) return std::nullopt;
  auto dims = reduced_dims(node, r);
  if (!dims || dims->empty() || *dims->begin() != r.rank - static_cast<int>(dims->size())) return std::nullopt;
  r.inner = static_cast<int>(dims->size());
  if (family->second.normalization) {
    r.keepdim = true;
  } else {
    const auto* keepdim = std::get_if<bool>(arg_value(node, "keepdim"));
    r.keepdim = keepdim != nullptr && *keepdim;
  }
  if (r.kind == Kind::Var || r.kind == Kind::Std) {
    auto correction = correction_of(node);
    if (!correction) return std::nullopt;
    r.correction = *correction;
  }
  // An explicit dtype must be the result's: the kernel computes in float32 and stores as the
  // result's dtype, which is then what was asked for.
  const ArgValue* dtype = arg_value(node, "dtype");
  if (dtype != nullptr && !std::holds_alternative<NoneArg>(*dtype)) {
    const auto* code = std::get_if<std::int64_t>(dtype);
    if (code == nullptr || static_cast<c10::ScalarType>(*code) != graph.value(node.outputs[0]).type.dtype) return std::nullopt;
  }
  return r;
}

}  // namespace zenith::ir
