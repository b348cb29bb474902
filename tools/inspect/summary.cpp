#include "inspect/summary.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "inspect/dump_file.h"

namespace zenith::inspect {
namespace {

using Sorted = std::vector<std::pair<std::string, std::int64_t>>;

// Largest count first; equal counts by name so that the output is stable.
Sorted sorted_by_count(const Counts& counts) {
  Sorted sorted(counts.begin(), counts.end());
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  return sorted;
}

void write_counts(const std::string& title, const Counts& counts, std::ostream& out) {
  out << title << ":\n";
  if (counts.empty()) out << "  (none)\n";
  for (const auto& [name, count] : sorted_by_count(counts)) out << fmt::format("  {:>6}  {}\n", count, name);
}

void write_header(const Dump& dump, std::ostream& out) {
  out << fmt::format("module:     {}\n", dump.module_name.empty() ? "(unnamed)" : dump.module_name);
  out << fmt::format("signature:  {}\n", dump.signature.empty() ? "(none recorded)" : dump.signature);
  out << fmt::format("graph:      {} nodes captured, {} after the passes; {} inputs, {} outputs\n",
                     dump.captured.nodes.size(), dump.optimized.nodes.size(), dump.optimized.inputs.size(),
                     dump.optimized.outputs.size());
  out << fmt::format("plan:       {} steps\n", dump.steps.size());
}

// Per step that a backend of higher priority declined: its backend, its ops and each refusal.
void write_placement(const ir::Graph& graph, const std::vector<DumpStep>& steps, std::ostream& out) {
  out << "groups a higher-priority backend declined, and why:\n";
  bool any = false;
  for (std::size_t k = 0; k < steps.size(); ++k) {
    if (steps[k].declined.empty()) continue;
    any = true;
    out << fmt::format("  step {} ran on {}: {}\n", k, steps[k].backend, step_ops(graph, steps[k]));
    for (const auto& reason : steps[k].declined) out << "    declined by " << reason << '\n';
  }
  if (!any) out << "  (none: every group went to the first backend asked)\n";
}

void write_passes(const CompileReport& report, std::ostream& out) {
  out << "passes:\n";
  if (report.passes.empty()) out << "  (none recorded)\n";
  for (const auto& pass : report.passes) {
    out << fmt::format("  {:<36} nodes {:>5} -> {:<5} {:>9.3f} ms  {}\n", pass.name, pass.nodes_before,
                       pass.nodes_after, pass.milliseconds, counters_text(pass.counters));
  }
}

void write_times(const CompileReport& report, std::ostream& out) {
  out << fmt::format("compile times: capture {:.3f} ms, passes {:.3f} ms, backend {:.3f} ms, total {:.3f} ms\n",
                     report.capture_ms, report.passes_ms, report.backend_ms, report.total_ms);
  out << fmt::format("kernels: {} groups, {} compiled, {} from a backend cache, {} need no compile, {} host nodes\n",
                     report.groups, report.kernels_compiled, report.kernel_cache_hits, report.groups_without_compile,
                     report.host_nodes);
  const auto& cache = report.plan_cache;
  out << fmt::format("plan cache at capture: {} hits, {} misses ({} recaptures), {} evictions, {} of {} plans\n",
                     cache.hits, cache.misses, cache.recaptures, cache.evictions, cache.size, cache.capacity);
  out << fmt::format("dynamic shapes at capture: {} symbolic plans served {} new signatures; {} kernels compiled\n",
                     cache.symbolic_plans, cache.instantiations, cache.kernels_compiled);
  if (!report.symbolic.empty()) out << fmt::format("symbolic: {} (probes {:.3f} ms)\n", report.symbolic, report.probe_ms);
  if (!report.static_reason.empty()) out << fmt::format("static: {}\n", report.static_reason);
  if (report.eager_fallback) out << fmt::format("eager fallback: {}\n", report.fallback_reason);
  if (!report.graph_breaks.empty()) {
    out << fmt::format("graph breaks: {} nodes run eagerly between kernels\n", report.graph_breaks.size());
    for (const auto& line : report.graph_breaks) out << "  " << line << "\n";
  }
  if (!report.value_checks.empty()) {
    out << fmt::format("value checks: {} data reads checked while the plan runs\n", report.value_checks.size());
    for (const auto& line : report.value_checks) out << "  " << line << "\n";
  }
  if (report.backward.compiled) {
    out << fmt::format("backward: {} nodes, {} kernel launches, {} values saved, {} recomputed, {:.3f} ms; {} training "
                       "calls at capture\n",
                       report.backward.nodes, report.backward.groups, report.backward.saved_values,
                       report.backward.recomputed_values, report.backward.ms, report.plan_cache.training_calls);
  }
}

}  // namespace

void write_summary(const Dump& dump, std::ostream& out) {
  write_header(dump, out);
  write_counts("ops in the optimized graph, by count", op_counts(dump.optimized), out);
  write_counts("nodes per backend (from the plan's steps)", backend_counts(dump), out);
  write_placement(dump.optimized, dump.steps, out);
  write_passes(dump.report, out);
  write_times(dump.report, out);
  if (!dump.backward.nodes.empty()) write_counts("ops in the backward graph, by count", op_counts(dump.backward), out);
}

}  // namespace zenith::inspect
