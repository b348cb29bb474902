#include "inspect/dump_file.h"

#include <fmt/format.h>

#include "common/error_text.h"
#include "zenith/error.h"

namespace zenith::inspect {
namespace {

// dump_from_json reads these with json::value, whose type errors name no field.
void check_header_types(const nlohmann::json& json) {
  if (!json.is_object()) return;  // dump_from_json says so, with the path
  for (const char* key : {"kind", "module", "signature"}) {
    if (json.contains(key) && !json[key].is_string()) {
      throw Error(fmt::format("dump at /{}: expected a string, got {}", key, json[key].dump()));
    }
  }
  if (json.contains("schema_version") && !json["schema_version"].is_number_integer()) {
    throw Error(fmt::format("dump at /schema_version: expected an integer, got {}", json["schema_version"].dump()));
  }
}

void check_steps(const Dump& dump) {
  const auto node_count = dump.optimized.nodes.size();
  for (std::size_t s = 0; s < dump.steps.size(); ++s) {
    for (int node : dump.steps[s].nodes) {
      if (node < 0 || static_cast<std::size_t>(node) >= node_count) {
        throw Error(fmt::format("dump at /steps/{}/nodes: node {} does not exist (the optimized graph has {} nodes)", s,
                                node, node_count));
      }
    }
  }
}

}  // namespace

Dump load_dump(const std::string& path) {
  // read_json_file names the file and the byte of a syntax error itself.
  auto json = read_json_file(path);
  try {
    check_header_types(json);
    auto dump = dump_from_json(json);
    check_steps(dump);
    return dump;
  } catch (const std::exception& e) {
    // nlohmann and c10 errors can come through too (a field of the wrong type, a huge constant).
    throw Error(fmt::format("{}: {}", path, tools::error_text(e)));
  }
}

std::vector<std::string> backend_per_node(const Dump& dump) {
  std::vector<std::string> backends(dump.optimized.nodes.size(), "-");
  for (const auto& step : dump.steps) {
    for (int node : step.nodes) backends.at(node) = step.backend;
  }
  return backends;
}

Counts op_counts(const ir::Graph& graph) {
  Counts counts;
  for (const auto& node : graph.nodes) counts[node.qualified_name()] += 1;
  return counts;
}

Counts backend_counts(const Dump& dump) {
  Counts counts;
  for (const auto& backend : backend_per_node(dump)) counts[backend == "-" ? "(no step)" : backend] += 1;
  return counts;
}

std::string step_ops(const ir::Graph& graph, const DumpStep& step) {
  std::string ops;
  for (int index : step.nodes) {
    ops += (ops.empty() ? "" : " + ") + graph.nodes.at(static_cast<std::size_t>(index)).qualified_name();
  }
  return ops.empty() ? "(no nodes)" : ops;
}

std::string counters_text(const Counts& counters) {
  std::string text;
  for (const auto& [name, value] : counters) text += fmt::format("{}{}={}", text.empty() ? "" : ", ", name, value);
  return text.empty() ? "-" : text;
}

}  // namespace zenith::inspect
