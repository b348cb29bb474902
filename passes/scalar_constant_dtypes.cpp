#include "passes/scalar_constant_dtypes.h"

#include <map>
#include <set>
#include <string>
#include <variant>

namespace zenith::passes {
namespace {

// Ops that run through ATen's TensorIterator with their operands cast to the common dtype.
bool casts_to_common_dtype(const ir::Node& node) {
  static const std::set<std::string> ops = {"aten::add", "aten::sub", "aten::mul", "aten::div", "aten::rsub",
                                            "aten::where"};
  return ops.count(node.op) > 0;
}

}  // namespace

void ScalarConstantDtypes::run(ir::Graph& graph, PassReport& report) {
  std::int64_t narrowed = 0;
  std::map<int, int> copies;  // float64 constant -> its float32 copy
  for (auto& node : graph.nodes) {
    if (node.outputs.size() != 1 || !casts_to_common_dtype(node)) continue;
    if (graph.value(node.outputs[0]).type.dtype != at::kFloat) continue;
    for (auto& arg : node.args) {
      auto* ref = std::get_if<ir::ValueRef>(&arg.value);
      if (ref == nullptr) continue;
      const auto& operand = graph.value(ref->id);
      if (operand.role != ir::ValueRole::Constant || operand.type.rank() != 0 || operand.type.dtype != at::kDouble) {
        continue;
      }
      const auto data = graph.constants.find(ref->id);
      if (data == graph.constants.end() || !data->second.defined()) continue;
      auto copy = copies.find(ref->id);
      if (copy == copies.end()) {
        auto type = operand.type;
        type.dtype = at::kFloat;
        const auto tensor = data->second.to(at::kFloat);
        const int id = graph.add_value(type, ir::ValueRole::Constant);
        graph.constants[id] = tensor;
        copy = copies.emplace(ref->id, id).first;
      }
      ref->id = copy->second;
      ++narrowed;
    }
  }
  report.counters["narrowed"] = narrowed;
}

}  // namespace zenith::passes
