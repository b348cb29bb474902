#include "passes/pass_manager.h"

#include "core/elapsed.h"
#include "core/log.h"
#include "core/verifier.h"
#include "passes/common_subexpression_elimination.h"
#include "passes/constant_folding.h"
#include "passes/dead_code_elimination.h"
#include "passes/fusion.h"

namespace zenith::passes {

void PassManager::add(std::unique_ptr<Pass> pass) { passes_.push_back(std::move(pass)); }

std::vector<PassReport> PassManager::run(ir::Graph& graph) const {
  std::vector<PassReport> reports;
  for (const auto& pass : passes_) {
    PassReport report;
    report.name = pass->name();
    report.nodes_before = static_cast<std::int64_t>(graph.nodes.size());
    auto start = Clock::now();
    pass->run(graph, report);
    report.milliseconds = ms_since(start);
    report.nodes_after = static_cast<std::int64_t>(graph.nodes.size());
    try {
      ir::verify(graph);
    } catch (const Error& error) {
      throw Error("pass '" + report.name + "' left an invalid graph: " + error.what());
    }
    log::debug("pass {}: {} -> {} nodes in {:.3f} ms", report.name, report.nodes_before, report.nodes_after,
               report.milliseconds);
    reports.push_back(std::move(report));
  }
  return reports;
}

PassManager PassManager::default_pipeline(const CompileOptions& options) {
  PassManager manager;
  manager.add(std::make_unique<ConstantFolding>());
  manager.add(std::make_unique<CommonSubexpressionElimination>());
  manager.add(std::make_unique<DeadCodeElimination>());
  manager.add(std::make_unique<ElementwiseFusion>());
  return manager;
}

}  // namespace zenith::passes
