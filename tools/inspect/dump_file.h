// Loading a trace dump for the inspect subcommands, with errors that always name the file.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/dump.h"

namespace zenith::inspect {

/// Reads and checks a dump ("kind": "dump"). Throws zenith::Error naming `path` and the JSON
/// position or field of the first problem, including steps that name nodes the graph lacks.
Dump load_dump(const std::string& path);

/// Per node of the optimized graph: the backend of the step that runs it, or "-" when no step does.
std::vector<std::string> backend_per_node(const Dump& dump);

/// Counts by name, ordered by name.
using Counts = std::map<std::string, std::int64_t>;

/// How many nodes of `graph` call each op (`aten::add.Tensor`).
Counts op_counts(const ir::Graph& graph);

/// How many nodes of the optimized graph each backend runs ("(no step)" for nodes no step runs).
Counts backend_counts(const Dump& dump);

/// A step's ops in plan order, as "aten::mul.Tensor + aten::relu" ("(no nodes)" for none).
std::string step_ops(const ir::Graph& graph, const DumpStep& step);

/// A pass's counters as "name=value, ..." ("-" when there are none).
std::string counters_text(const Counts& counters);

}  // namespace zenith::inspect
