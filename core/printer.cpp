#include "core/printer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace zenith::ir {

std::string node_to_text(const Graph& graph, const Node& node) {
  std::vector<std::string> outs, args, types;
  for (int id : node.outputs) {
    outs.push_back("%" + std::to_string(id));
    types.push_back(graph.has_value(id) ? graph.value(id).type.to_string() : "?");
  }
  for (const auto& argument : node.args) args.push_back(argument.to_string());
  return fmt::format("{} = {}({})  : {}", fmt::join(outs, ", "), node.qualified_name(), fmt::join(args, ", "),
                     fmt::join(types, "; "));
}

std::string to_text(const Graph& graph) {
  std::string text = "graph(\n";
  auto describe = [&](const Value& value) {
    std::string name = value.name.empty() ? "" : " " + value.name;
    return fmt::format("  %{} : {}  ({}{})\n", value.id, value.type.to_string(), role_name(value.role), name);
  };
  for (int id : graph.inputs) text += describe(graph.value(id));
  for (const auto& [id, tensor] : graph.constants) text += describe(graph.value(id));
  text += "):\n";
  for (const auto& node : graph.nodes) text += "  " + node_to_text(graph, node) + "\n";
  std::vector<std::string> outs;
  for (int id : graph.outputs) outs.push_back("%" + std::to_string(id));
  text += fmt::format("  return ({})\n", fmt::join(outs, ", "));
  return text;
}

}  // namespace zenith::ir
