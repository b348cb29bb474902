#include "passes/partition.h"

#include <fmt/format.h>

#include "core/graph_json.h"
#include "core/op_schema.h"
#include "core/printer.h"
#include "zenith/error.h"

namespace zenith::passes {
namespace {

// The first backend, in priority order, that claims the group; reasons collects the refusals.
const Backend* claim(const std::vector<const Backend*>& backends, const std::string& json, std::string& reasons) {
  for (const Backend* backend : backends) {
    auto refusal = backend->query(json);
    if (!refusal) return backend;
    reasons += fmt::format("\n  {}: {}", backend->name(), *refusal);
  }
  return nullptr;
}

}  // namespace

std::vector<PlacedGroup> partition(const ir::Graph& graph, const std::vector<const Backend*>& backends,
                                   const std::vector<std::vector<int>>& groups) {
  auto consumers = graph.consumers();
  std::vector<int> group_of(graph.nodes.size(), -1);
  for (std::size_t g = 0; g < groups.size(); ++g)
    for (int n : groups[g]) group_of[n] = static_cast<int>(g);

  std::vector<PlacedGroup> placed;
  auto place_single = [&](int n) {
    PlacedGroup single;
    single.group = ir::extract_group(graph, {n}, consumers);
    if (ir::alias_facts(graph.nodes[n]).is_view) {
      placed.push_back(std::move(single));
      return;
    }
    single.group_json = ir::to_json(single.group.graph, ir::GraphKind::Group, 0).dump();
    std::string reasons;
    single.backend = claim(backends, single.group_json, reasons);
    if (single.backend == nullptr) {
      throw Error(fmt::format("no backend can run node {} `{}`{}{}", n, ir::node_to_text(graph, graph.nodes[n]),
                              backends.empty() ? "\n  no backend is loaded (see zenith-inspect --plugins)" : "",
                              reasons));
    }
    placed.push_back(std::move(single));
  };

  std::vector<bool> done(graph.nodes.size(), false);
  for (std::size_t n = 0; n < graph.nodes.size(); ++n) {
    if (done[n]) continue;
    int g = group_of[n];
    if (g < 0 || groups[g].size() < 2) {
      done[n] = true;
      place_single(static_cast<int>(n));
      continue;
    }
    PlacedGroup candidate;
    candidate.group = ir::extract_group(graph, groups[g], consumers);
    candidate.group_json = ir::to_json(candidate.group.graph, ir::GraphKind::Group, 0).dump();
    std::string reasons;
    candidate.backend = claim(backends, candidate.group_json, reasons);
    for (int member : groups[g]) done[member] = true;
    if (candidate.backend != nullptr) {
      placed.push_back(std::move(candidate));
    } else {
      for (int member : groups[g]) place_single(member);
    }
  }
  return placed;
}

}  // namespace zenith::passes
