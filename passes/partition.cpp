#include "passes/partition.h"

#include <algorithm>
#include <queue>
#include <set>

#include <fmt/format.h>

#include "core/graph_json.h"
#include "core/op_schema.h"
#include "core/printer.h"
#include "zenith/error.h"

namespace zenith::passes {
namespace {

// The first backend, in priority order, that claims the group; `declined` collects the refusals
// of those asked before it, as "name: reason".
const Backend* claim(const std::vector<const Backend*>& backends, const std::string& json,
                     std::vector<std::string>& declined) {
  for (const Backend* backend : backends) {
    auto refusal = backend->query(json);
    if (!refusal) return backend;
    declined.push_back(fmt::format("{}: {}", backend->name(), *refusal));
  }
  return nullptr;
}

std::string reasons_text(const std::vector<std::string>& declined) {
  std::string text;
  for (const auto& line : declined) text += "\n  " + line;
  return text;
}

}  // namespace

std::vector<PlacedGroup> partition(const ir::Graph& graph, const std::vector<const Backend*>& backends) {
  auto consumers = graph.consumers();
  std::vector<int> group_of(graph.nodes.size(), -1);
  std::vector<std::vector<int>> groups;
  for (std::size_t n = 0; n < graph.nodes.size(); ++n) {
    int g = graph.nodes[n].fusion_group;
    if (g < 0) continue;
    if (static_cast<std::size_t>(g) >= groups.size()) groups.resize(g + 1);
    groups[g].push_back(static_cast<int>(n));
    group_of[n] = g;
  }

  std::vector<PlacedGroup> placed;
  std::string first_unclaimed;
  auto place_single = [&](int n) {
    PlacedGroup single;
    single.group = ir::extract_group(graph, {n}, consumers);
    if (ir::alias_facts(graph.nodes[n]).is_view) {
      placed.push_back(std::move(single));
      return;
    }
    single.group_json = ir::to_json(single.group.graph, ir::GraphKind::Group, 0).dump();
    single.backend = claim(backends, single.group_json, single.declined);
    if (single.backend == nullptr) {
      single.eager = true;
      if (first_unclaimed.empty()) {
        first_unclaimed = fmt::format("no backend can run node {} `{}`{}{}", n, ir::node_to_text(graph, graph.nodes[n]),
                                      backends.empty() ? "\n  no backend is loaded (see zenith-inspect --plugins)" : "",
                                      reasons_text(single.declined));
      }
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
    candidate.backend = claim(backends, candidate.group_json, candidate.declined);
    for (int member : groups[g]) done[member] = true;
    if (candidate.backend != nullptr) {
      placed.push_back(std::move(candidate));
    } else {
      for (int member : groups[g]) place_single(member);
    }
  }
  // Graph breaks between kernels, yes; a plan of nothing but breaks is eager with extra steps.
  const bool any_kernel = std::any_of(placed.begin(), placed.end(), [](const PlacedGroup& p) { return p.backend; });
  if (!first_unclaimed.empty() && !any_kernel) throw Error(first_unclaimed);
  return placed;
}

std::vector<PlacedGroup> order_steps(const ir::Graph& graph, std::vector<PlacedGroup> placed) {
  auto producer = graph.producers();
  std::vector<int> step_of_node(graph.nodes.size(), -1);
  for (std::size_t s = 0; s < placed.size(); ++s)
    for (int n : placed[s].group.nodes) step_of_node[n] = static_cast<int>(s);
  // Kahn's algorithm, always taking the ready step whose first node comes first.
  std::vector<std::set<int>> successors(placed.size());
  std::vector<int> waiting(placed.size(), 0);
  for (std::size_t s = 0; s < placed.size(); ++s) {
    for (int n : placed[s].group.nodes) {
      for (int id : graph.nodes[n].input_ids()) {
        int from = producer[id] >= 0 ? step_of_node[producer[id]] : -1;
        if (from >= 0 && from != static_cast<int>(s) && successors[from].insert(static_cast<int>(s)).second) {
          ++waiting[s];
        }
      }
    }
  }
  auto first_node = [&](int s) { return placed[s].group.nodes.front(); };
  auto later = [&](int a, int b) { return first_node(a) > first_node(b); };
  std::priority_queue<int, std::vector<int>, decltype(later)> ready(later);
  for (std::size_t s = 0; s < placed.size(); ++s)
    if (waiting[s] == 0) ready.push(static_cast<int>(s));
  std::vector<PlacedGroup> ordered;
  while (!ready.empty()) {
    int s = ready.top();
    ready.pop();
    ordered.push_back(std::move(placed[s]));
    for (int next : successors[s])
      if (--waiting[next] == 0) ready.push(next);
  }
  if (ordered.size() != placed.size()) {
    throw Error("partitioning made groups that depend on each other in a cycle; the fusion pass must keep groups "
                "convex (this is a Zenith bug: please report it with the trace dump)");
  }
  return ordered;
}

}  // namespace zenith::passes
