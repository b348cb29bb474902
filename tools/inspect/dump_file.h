// Loading a trace dump for the inspect subcommands, with errors that always name the file.
#pragma once

#include <string>
#include <vector>

#include "core/dump.h"

namespace zenith::inspect {

/// Reads and checks a dump ("kind": "dump"). Throws zenith::Error naming `path` and the JSON
/// position or field of the first problem, including steps that name nodes the graph lacks.
Dump load_dump(const std::string& path);

/// Per node of the optimized graph: the backend of the step that runs it, or "-" when no step does.
std::vector<std::string> backend_per_node(const Dump& dump);

}  // namespace zenith::inspect
