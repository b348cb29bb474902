#include "inspect/dump_diff.h"

#include <map>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "inspect/dump_file.h"

namespace zenith::inspect {
namespace {

// A group as "backend: op + op + ...", its ops in plan order: two dumps share a group when the same
// backend runs the same ops in it.
Counts group_counts(const ir::Graph& graph, const std::vector<DumpStep>& steps) {
  Counts counts;
  for (const auto& step : steps) counts[fmt::format("{}: {}", step.backend, step_ops(graph, step))] += 1;
  return counts;
}

class DiffWriter {
 public:
  explicit DiffWriter(std::ostream& out) : out_(out) {}

  // One line: "label: same" or "label: before -> after" (a difference).
  void field(const std::string& label, const std::string& before, const std::string& after) {
    if (before == after) {
      out_ << fmt::format("{:<11}{}\n", label + ":", before.empty() ? "(none)" : before);
      return;
    }
    ++differences_;
    out_ << fmt::format("{:<11}{}\n{:<11}-> {}\n", label + ":", before.empty() ? "(none)" : before, "",
                        after.empty() ? "(none)" : after);
  }

  // The entries whose count changed, as "+N  name  before -> after"; "(same)" when none did.
  void counts(const std::string& title, const Counts& before, const Counts& after) {
    std::set<std::string> names;
    for (const auto& item : before) names.insert(item.first);
    for (const auto& item : after) names.insert(item.first);
    std::vector<std::string> lines;
    for (const auto& name : names) {
      const auto was = before.count(name) ? before.at(name) : 0, now = after.count(name) ? after.at(name) : 0;
      if (was != now) lines.push_back(fmt::format("  {:>+5}  {}  ({} -> {})\n", now - was, name, was, now));
    }
    out_ << title << (lines.empty() ? ": same\n" : ":\n");
    for (const auto& line : lines) out_ << line;
    differences_ += static_cast<int>(lines.size());
  }

  void passes(const std::vector<PassReport>& before, const std::vector<PassReport>& after) {
    std::map<std::string, const PassReport*> was, now;
    std::vector<std::string> order;
    for (const auto& pass : before) {
      was[pass.name] = &pass;
      order.push_back(pass.name);
    }
    for (const auto& pass : after) {
      if (!was.count(pass.name)) order.push_back(pass.name);
      now[pass.name] = &pass;
    }
    std::vector<std::string> lines;
    auto describe = [](const PassReport* pass) {
      return pass ? fmt::format("nodes {} -> {}, {}", pass->nodes_before, pass->nodes_after,
                                counters_text(pass->counters))
                  : std::string("(did not run)");
    };
    for (const auto& name : order) {
      const auto a = describe(was.count(name) ? was[name] : nullptr), b = describe(now.count(name) ? now[name] : nullptr);
      if (a != b) lines.push_back(fmt::format("  {}: {}\n  {}  became {}\n", name, a, std::string(name.size(), ' '), b));
    }
    out_ << "passes" << (lines.empty() ? ": same\n" : ":\n");
    for (const auto& line : lines) out_ << line;
    differences_ += static_cast<int>(lines.size());
  }

  void note(const std::string& text) { out_ << text << '\n'; }
  int differences() const { return differences_; }

 private:
  std::ostream& out_;
  int differences_ = 0;
};

std::string graph_sizes(const Dump& dump) {
  return fmt::format("{} nodes captured, {} after the passes; {} inputs, {} outputs; {} plan steps",
                     dump.captured.nodes.size(), dump.optimized.nodes.size(), dump.optimized.inputs.size(),
                     dump.optimized.outputs.size(), dump.steps.size());
}

std::string verdict(const CompileReport& report) {
  if (report.eager_fallback) return "runs eagerly: " + report.fallback_reason;
  std::string text = report.backward.compiled ? "compiled, with a compiled backward" : "compiled";
  if (!report.symbolic.empty()) text += "; symbolic: " + report.symbolic;
  if (!report.static_reason.empty()) text += "; static: " + report.static_reason;
  return text;
}

}  // namespace

int write_dump_diff(const Dump& before, const Dump& after, std::ostream& out) {
  DiffWriter diff(out);
  diff.field("module", before.module_name, after.module_name);
  diff.field("signature", before.signature, after.signature);
  diff.field("graph", graph_sizes(before), graph_sizes(after));
  diff.field("verdict", verdict(before.report), verdict(after.report));
  diff.counts("ops in the optimized graph", op_counts(before.optimized), op_counts(after.optimized));
  diff.counts("ops as captured", op_counts(before.captured), op_counts(after.captured));
  diff.counts("groups (backend: ops)", group_counts(before.optimized, before.steps),
              group_counts(after.optimized, after.steps));
  diff.counts("nodes per backend", backend_counts(before), backend_counts(after));
  diff.passes(before.report.passes, after.report.passes);
  if (!before.backward.nodes.empty() || !after.backward.nodes.empty()) {
    diff.counts("ops in the backward graph", op_counts(before.backward), op_counts(after.backward));
    diff.counts("backward groups (backend: ops)", group_counts(before.backward, before.backward_steps),
                group_counts(after.backward, after.backward_steps));
  }
  diff.note(fmt::format("compile times (not compared): total {:.3f} ms -> {:.3f} ms", before.report.total_ms,
                        after.report.total_ms));
  diff.note(diff.differences() == 0 ? "no differences"
                                    : fmt::format("{} difference{}", diff.differences(),
                                                  diff.differences() == 1 ? "" : "s"));
  return diff.differences();
}

}  // namespace zenith::inspect
