// Trace dumps: one JSON file per compiled signature, for zenith-inspect and replay.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/graph.h"
#include "zenith/options.h"

namespace zenith {

/// Which backend runs which nodes of the optimized graph.
struct DumpStep {
  std::string backend;     ///< backend name, or "host"
  std::vector<int> nodes;  ///< indices into the optimized graph's nodes
  /// Why each backend of higher priority declined this step's group, as "name: reason".
  std::vector<std::string> declined;
};

/// Everything a dump holds.
struct Dump {
  std::string module_name;
  std::string signature;
  ir::Graph captured;
  ir::Graph optimized;
  std::vector<DumpStep> steps;
  CompileReport report;
  /// Training signatures: the optimized backward graph and its steps (empty otherwise). The
  /// optimized graph above is then the forward, whose extra outputs are the saved values.
  ir::Graph backward;
  std::vector<DumpStep> backward_steps;
};

/// Writes a dump as JSON ({"schema_version", "kind": "dump", ...}; docs/trace-format.md).
nlohmann::json dump_to_json(const Dump& dump, std::size_t constant_limit);
/// Reads a dump; throws zenith::Error naming the JSON path of the first bad field.
Dump dump_from_json(const nlohmann::json& json);
/// Writes `json` to `path` atomically (a temporary file in the same folder, then a rename).
void write_json_file(const std::string& path, const nlohmann::json& json);
/// Reads and parses a file; errors name the file and the byte position.
nlohmann::json read_json_file(const std::string& path);

/// A report as JSON, and back.
nlohmann::json report_to_json(const CompileReport& report);
CompileReport report_from_json(const nlohmann::json& json);

}  // namespace zenith
