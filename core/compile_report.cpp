// CompileReport::to_string, the report printed at info level for every compiled signature.
#include <fmt/format.h>

#include "zenith/options.h"

namespace zenith {

std::string CompileReport::to_string() const {
  std::string text = fmt::format("compiled {}\n", signature);
  if (eager_fallback) return text + fmt::format("  runs eagerly: {}\n", fallback_reason);
  std::string passes_text;
  for (const auto& pass : passes) {
    std::string counters;
    for (const auto& [name, count] : pass.counters) counters += fmt::format(" {}={}", name, count);
    passes_text += fmt::format("{}{} -{}{}", passes_text.empty() ? "" : ", ", pass.name,
                               pass.nodes_before - pass.nodes_after, counters.empty() ? "" : " [" + counters.substr(1) + "]");
  }
  text += fmt::format("  nodes: {} captured, {} after passes ({})\n", nodes_captured, nodes_final, passes_text);
  std::string per_backend;
  for (const auto& [name, count] : nodes_per_backend) {
    per_backend += fmt::format("{}{}: {} nodes", per_backend.empty() ? "" : ", ", name, count);
  }
  text += fmt::format("  plan: {} kernel launches ({}), {} view nodes on the host\n", groups,
                      per_backend.empty() ? "none" : per_backend, host_nodes);
  if (!graph_breaks.empty()) {
    text += fmt::format("  graph breaks: {} nodes run eagerly between kernels ({} of {} nodes in kernels):\n",
                        graph_breaks.size(), nodes_final - host_nodes - static_cast<std::int64_t>(graph_breaks.size()),
                        nodes_final - host_nodes);
    for (const auto& line : graph_breaks) text += fmt::format("    {}\n", line);
  }
  if (!value_checks.empty()) {
    text += fmt::format("  value checks: {} data reads, each checked as soon as computed (another value runs eagerly):\n",
                        value_checks.size());
    for (const auto& line : value_checks) text += fmt::format("    {}\n", line);
  }
  text += fmt::format("  kernels: {} compiled, {} from a cache, {} groups need no compile\n", kernels_compiled,
                      kernel_cache_hits, groups_without_compile);
  text += fmt::format("  time: capture {:.1f} ms, passes {:.1f} ms, backends {:.1f} ms, total {:.1f} ms", capture_ms,
                      passes_ms, backend_ms, total_ms);
  if (backward.compiled) {
    text += fmt::format("\n  backward: {} nodes, {} kernel launches, {} values saved, {} recomputed ({:.1f} ms)",
                        backward.nodes, backward.groups, backward.saved_values, backward.recomputed_values, backward.ms);
  }
  if (!symbolic.empty()) text += fmt::format("\n  symbolic: {} (probes {:.1f} ms)", symbolic, probe_ms);
  if (!static_reason.empty()) text += fmt::format("\n  static: {}", static_reason);
  text += fmt::format("\n  plan cache: {} hits, {} misses ({} recaptures), {} evictions, {} of {} plans; {} symbolic "
                      "plans served {} new signatures; {} kernels compiled; {} training calls",
                      plan_cache.hits, plan_cache.misses, plan_cache.recaptures, plan_cache.evictions, plan_cache.size,
                      plan_cache.capacity, plan_cache.symbolic_plans, plan_cache.instantiations,
                      plan_cache.kernels_compiled, plan_cache.training_calls);
  if (!dump_path.empty()) text += fmt::format("\n  dump: {}", dump_path);
  return text;
}

}  // namespace zenith
