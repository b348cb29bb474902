// Lowering: an optimized graph becomes a Plan: partitioned over backends, groups compiled into
// kernels (several at a time), and each intermediate value released after its last reader.
#pragma once

#include <vector>

#include "core/backend.h"
#include "core/plan.h"
#include "zenith/options.h"

namespace zenith::passes {

/// Builds the plan and fills the partition and kernel fields of `report` (groups, host_nodes,
/// nodes_per_backend, kernels_compiled). Throws zenith::Error when a node has no backend or a
/// backend fails to compile.
/// `backend_options` is the JSON object passed to every compile (zn_compile_args.options_json).
Plan lower_to_plan(ir::Graph graph, const std::vector<const Backend*>& backends, CompileReport& report,
                   const std::string& backend_options = "{}");

/// Fills Step::release_after from the steps' inputs: a value is released after the last step
/// reading it, unless it is a graph input, a constant or a graph output.
void plan_memory(Plan& plan);

}  // namespace zenith::passes
