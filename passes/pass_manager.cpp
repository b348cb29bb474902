#include "passes/pass_manager.h"

#include <map>

#include <fmt/format.h>

#include "core/elapsed.h"
#include "core/log.h"
#include "core/verifier.h"
#include "passes/attention_fusion.h"
#include "passes/batch_norm_decomposition.h"
#include "passes/cast_copies.h"
#include "passes/common_subexpression_elimination.h"
#include "passes/constant_folding.h"
#include "passes/convolution_epilogue.h"
#include "passes/dead_code_elimination.h"
#include "passes/grouped_query_attention.h"
#include "passes/identity_elimination.h"
#include "passes/reduction_input_casts.h"
#include "passes/rotary_embedding.h"
#include "passes/round_trip_casts.h"
#include "passes/scalar_constant_dtypes.h"
#include "passes/scalar_constants_on_device.h"
#include "passes/sibling_products.h"
#include "passes/fusion.h"

namespace zenith::passes {
namespace {

std::map<std::string, std::int64_t> op_counts(const ir::Graph& graph) {
  std::map<std::string, std::int64_t> counts;
  for (const auto& node : graph.nodes) ++counts[node.op];
  return counts;
}

// What a pass did, for ZENITH_LOG=debug: its counters and the ops it removed or added, e.g.
// " [folded=3]; -2 aten::mul, -1 aten::add, +1 aten::addmm".
std::string describe_effect(const PassReport& report, const std::map<std::string, std::int64_t>& before,
                            const std::map<std::string, std::int64_t>& after) {
  std::string counters;
  for (const auto& [name, count] : report.counters) counters += fmt::format("{}{}={}", counters.empty() ? "" : " ", name, count);
  std::string ops;
  auto note = [&](const std::string& op, std::int64_t change) {
    if (change != 0) ops += fmt::format("{}{:+d} {}", ops.empty() ? "" : ", ", change, op);
  };
  for (const auto& [op, count] : before) note(op, (after.count(op) ? after.at(op) : 0) - count);
  for (const auto& [op, count] : after) {
    if (!before.count(op)) note(op, count);
  }
  return (counters.empty() ? "" : " [" + counters + "]") + (ops.empty() ? "; no op added or removed" : "; " + ops);
}

}  // namespace

void PassManager::add(std::unique_ptr<Pass> pass) { passes_.push_back(std::move(pass)); }

std::vector<PassReport> PassManager::run(ir::Graph& graph) const {
  std::vector<PassReport> reports;
  for (const auto& pass : passes_) {
    PassReport report;
    report.name = pass->name();
    report.nodes_before = static_cast<std::int64_t>(graph.nodes.size());
    const bool debug = log::level() <= LogLevel::Debug;
    const auto ops_before = debug ? op_counts(graph) : std::map<std::string, std::int64_t>{};
    auto start = Clock::now();
    pass->run(graph, report);
    report.milliseconds = ms_since(start);
    report.nodes_after = static_cast<std::int64_t>(graph.nodes.size());
    try {
      ir::verify(graph);
    } catch (const Error& error) {
      throw Error("pass '" + report.name + "' left an invalid graph: " + error.what());
    }
    if (debug) {
      log::debug("pass {}: {} -> {} nodes in {:.3f} ms{}", report.name, report.nodes_before, report.nodes_after,
                 report.milliseconds, describe_effect(report, ops_before, op_counts(graph)));
    }
    reports.push_back(std::move(report));
  }
  return reports;
}

PassManager PassManager::default_pipeline(const CompileOptions& options, bool inference) {
  PassManager manager;
  manager.add(std::make_unique<IdentityElimination>());
  // Before the decomposition: a batch norm between a convolution and its ReLU folds into both.
  if (inference && options.keep_derived_values) {
    manager.add(std::make_unique<ConvolutionEpilogue>(/*cuda_only=*/true, options.kept_weight_fraction));
  }
  manager.add(std::make_unique<BatchNormDecomposition>());
  manager.add(std::make_unique<ConstantFolding>());
  manager.add(std::make_unique<ScalarConstantDtypes>());
  manager.add(std::make_unique<ScalarConstantsOnDevice>());
  manager.add(std::make_unique<CommonSubexpressionElimination>());
  manager.add(std::make_unique<RoundTripCastElimination>());
  manager.add(std::make_unique<ReductionInputCasts>());
  manager.add(std::make_unique<AttentionFusion>(/*cuda_only=*/true, /*blind_rows=*/inference));
  if (inference) manager.add(std::make_unique<GroupedQueryAttention>());
  if (inference) manager.add(std::make_unique<RotaryEmbedding>());
  if (inference && options.keep_derived_values) manager.add(std::make_unique<SiblingProducts>());
  manager.add(std::make_unique<DeadCodeElimination>());
  manager.add(std::make_unique<CastCopies>());
  manager.add(std::make_unique<ElementwiseFusion>());
  return manager;
}

}  // namespace zenith::passes
