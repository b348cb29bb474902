// The attention rewrites (passes/attention_fusion.h, passes/grouped_query_attention.h) on seeded
// random attention (tests/common/random_attention.h), on the CPU: each program is captured as
// compile() captures a callable, the passes before and including the rewrites run as the inference
// pipeline runs them (the rewrites told to act on CPU tensors, which they leave alone in a
// compile), the graph is verified, and the reference interpreter runs it on every draw of the
// inputs against eager on the same draw. The CUDA suite runs the same programs end to end
// (tests/gpu/test_random_fusion.cpp).
//
// Tolerances, as max |rewritten - eager| / max |eager|: on the CPU the fused node runs ATen's own
// scaled_dot_product_attention, which sums in float32 in another order than two matrix products
// and a softmax, and (float16, bfloat16) rounds the scores and probabilities only once. float32
// 1e-5 (a few ulps of logits up to about 4, tests/common/random_attention.h); float16 1e-2 and
// bfloat16 5e-2 (eager written out rounds scores and probabilities to 2^-11 or 2^-8 relative).
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "common/program_checks.h"
#include "common/random_attention.h"
#include "common/seed_offset.h"
#include "passes/attention_fusion.h"
#include "passes/common_subexpression_elimination.h"
#include "passes/constant_folding.h"
#include "passes/dead_code_elimination.h"
#include "passes/grouped_query_attention.h"
#include "passes/identity_elimination.h"
#include "passes/reduction_input_casts.h"
#include "passes/round_trip_casts.h"

namespace zenith::passes {
namespace {

constexpr int kPrograms = 150;

double tolerance(c10::ScalarType dtype) { return dtype == at::kHalf ? 1e-2 : dtype == at::kBFloat16 ? 5e-2 : 1e-5; }

// The inference pipeline up to and including the attention rewrites; the counters of the two.
struct Rewritten {
  std::int64_t fused = 0;
  std::int64_t ungrouped = 0;
};

Rewritten rewrite(ir::Graph& graph) {
  std::vector<std::unique_ptr<Pass>> pipeline;
  pipeline.push_back(std::make_unique<IdentityElimination>());
  pipeline.push_back(std::make_unique<ConstantFolding>());
  pipeline.push_back(std::make_unique<CommonSubexpressionElimination>());
  pipeline.push_back(std::make_unique<RoundTripCastElimination>());
  pipeline.push_back(std::make_unique<ReductionInputCasts>());
  pipeline.push_back(std::make_unique<AttentionFusion>(/*cuda_only=*/false));
  pipeline.push_back(std::make_unique<GroupedQueryAttention>(/*cuda_only=*/false));
  pipeline.push_back(std::make_unique<DeadCodeElimination>());
  Rewritten counts;
  for (auto& pass : pipeline) {
    PassReport report;
    pass->run(graph, report);
    if (pass->name() == "fuse_attention") counts.fused += report.counters["fused"];
    if (pass->name() == "grouped_query_attention") counts.ungrouped += report.counters["ungrouped"];
  }
  return counts;
}

TEST(RandomAttentionRewrites, RewrittenGraphsMatchEagerOnEveryDraw) {
  at::NoGradGuard no_grad;
  int failures = 0, programs_fused = 0, programs_ungrouped = 0;
  double worst = 0;
  const int first = testing::first_seed();
  for (int seed = first; seed < first + kPrograms; ++seed) {
    const auto dtype = testing::dtype_for_seed(seed);
    const auto program = testing::make_random_attention(static_cast<std::uint64_t>(seed), dtype, at::kCPU);
    const auto problems = testing::rewritten_differences(
        program,
        [&](ir::Graph& graph) {
          const auto counts = rewrite(graph);
          programs_fused += counts.fused > 0;
          programs_ungrouped += counts.ungrouped > 0;
        },
        tolerance(dtype), worst);
    if (!problems.empty()) {
      ++failures;
      ADD_FAILURE() << "seed " << seed << "\n" << problems;
    }
  }
  std::printf("random attention rewrites: %d programs, %d fused from the written-out form, %d reading repeated "
              "key-value heads as they are; largest error %.3f of the tolerance; %d failures\n",
              kPrograms, programs_fused, programs_ungrouped, worst, failures);
  // About half the programs are written out, and a third of those with a mask the fusion takes;
  // a quarter share key-value heads in a form the grouped rewrite reads. Far fewer would mean a
  // rewrite stopped matching the forms models write, and the comparisons checked little of it.
  EXPECT_GE(programs_fused, kPrograms / 10);
  EXPECT_GE(programs_ungrouped, kPrograms / 20);
}

}  // namespace
}  // namespace zenith::passes
