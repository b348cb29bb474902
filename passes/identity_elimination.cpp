#include "passes/identity_elimination.h"

#include <set>
#include <string>

namespace zenith::passes {
namespace {

// ATen's dropouts return `input` itself when they draw nothing (aten/src/ATen/native/Dropout.cpp):
// not training, or a probability of zero. Their in-place forms (`nn.Dropout(inplace=True)`, as in
// torchvision's EfficientNet heads) then write nothing and return `self`.
bool draws_nothing(const ir::Node& node) {
  static const std::set<std::string> dropouts = {"aten::dropout", "aten::feature_dropout", "aten::alpha_dropout",
                                                 "aten::feature_alpha_dropout", "aten::dropout_",
                                                 "aten::feature_dropout_", "aten::alpha_dropout_",
                                                 "aten::feature_alpha_dropout_"};
  if (!dropouts.count(node.op) || node.outputs.size() != 1) return false;
  const auto* train = node.arg("train");
  const auto* p = node.arg("p");
  const bool* training = train ? std::get_if<bool>(&train->value) : nullptr;
  const double* probability = p ? std::get_if<double>(&p->value) : nullptr;
  return (training != nullptr && !*training) || (probability != nullptr && *probability == 0.0);
}

}  // namespace

int returned_input(const ir::Node& node) {
  if (!draws_nothing(node)) return -1;
  const auto* input = node.arg(node.op.back() == '_' ? "self" : "input");
  const auto* ref = input ? std::get_if<ir::ValueRef>(&input->value) : nullptr;
  return ref ? ref->id : -1;
}

void IdentityElimination::run(ir::Graph& graph, PassReport& report) {
  std::vector<ir::Node> kept;
  kept.reserve(graph.nodes.size());
  std::int64_t removed = 0;
  for (auto& node : graph.nodes) {
    if (int input = returned_input(node); input >= 0) {
      graph.replace_uses(node.outputs.front(), input);
      ++removed;
      continue;
    }
    kept.push_back(std::move(node));
  }
  graph.nodes = std::move(kept);
  graph.remove_unused_values();
  report.counters["removed"] = removed;
}

}  // namespace zenith::passes
