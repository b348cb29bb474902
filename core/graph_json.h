// The IR as JSON (docs/trace-format.md): written for dumps and plugins, read back for replay.
#pragma once

#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

#include "core/graph.h"

namespace zenith::ir {

/// The schema version this build writes and reads.
constexpr int kSchemaVersion = 1;

/// Whether the JSON describes a whole graph or one backend group.
enum class GraphKind { Graph, Group };

/// Writes `graph`. Constant data larger than `constant_limit` bytes is written as null.
nlohmann::json to_json(const Graph& graph, GraphKind kind, std::size_t constant_limit = SIZE_MAX);

/// Reads a graph; throws zenith::Error naming the JSON path of the first bad field (e.g.
/// "/nodes/3/args/1: missing 'name'"), then verifies it. Constants written as null come back as
/// values without data (`allow_missing_constant_data` must then be true).
Graph from_json(const nlohmann::json& json, bool allow_missing_constant_data = false);

/// Parses JSON text; a syntax error becomes a zenith::Error with the byte position. `what` names
/// the source in the message (a file name, "group from the host").
nlohmann::json parse_json(const std::string& text, const std::string& what);

}  // namespace zenith::ir
