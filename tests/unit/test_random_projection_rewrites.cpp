// The sibling-products rewrite (passes/sibling_products.h) on seeded random projections
// (tests/common/random_projection.h), on the CPU: each program is captured as compile() captures a
// callable, its weights, biases and norm weights then marked as parameters (what they are in a
// module, and what the rewrite concatenates), the passes before and including the rewrite run as
// the inference pipeline runs them (the rewrite told to act on CPU tensors, which it leaves alone
// in a compile), the graph is verified, and the reference interpreter runs it on every draw of
// the inputs against eager on the same draw. The CUDA suite runs the same programs end to end as
// modules whose parameters change between calls (tests/gpu/test_random_fusion.cpp).
//
// Tolerances, as max |rewritten - eager| / max |eager|: the concatenated product is one product
// over more columns, whose kernel may sum each dot product in another order. float32 1e-5;
// float16 and bfloat16, where a product rounds once, 1e-2 and 5e-2 (the generator's conditioning
// bound, 5e-3 and 2e-2, doubled and more).
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "common/program_checks.h"
#include "common/random_projection.h"
#include "common/seed_offset.h"
#include "passes/common_subexpression_elimination.h"
#include "passes/constant_folding.h"
#include "passes/dead_code_elimination.h"
#include "passes/identity_elimination.h"
#include "passes/sibling_products.h"

namespace zenith::passes {
namespace {

constexpr int kPrograms = 150;

double tolerance(c10::ScalarType dtype) { return dtype == at::kHalf ? 1e-2 : dtype == at::kBFloat16 ? 5e-2 : 1e-5; }

// Every input after x becomes a parameter, as a module holds its weights.
void weights_as_parameters(ir::Graph& graph) {
  for (std::size_t i = 1; i < graph.inputs.size(); ++i) graph.value(graph.inputs[i]).role = ir::ValueRole::Parameter;
}

// The inference pipeline up to and including the rewrite; its "concatenated" counter.
std::int64_t rewrite(ir::Graph& graph) {
  std::vector<std::unique_ptr<Pass>> pipeline;
  pipeline.push_back(std::make_unique<IdentityElimination>());
  pipeline.push_back(std::make_unique<ConstantFolding>());
  pipeline.push_back(std::make_unique<CommonSubexpressionElimination>());
  pipeline.push_back(std::make_unique<SiblingProducts>(/*cuda_only=*/false));
  pipeline.push_back(std::make_unique<DeadCodeElimination>());
  std::int64_t concatenated = 0;
  for (auto& pass : pipeline) {
    PassReport report;
    pass->run(graph, report);
    concatenated += report.counters["concatenated"];
  }
  return concatenated;
}

TEST(RandomProjectionRewrites, RewrittenGraphsMatchEagerOnEveryDraw) {
  at::NoGradGuard no_grad;
  int failures = 0, programs_concatenated = 0;
  double worst = 0;
  const int first = testing::first_seed();
  for (int seed = first; seed < first + kPrograms; ++seed) {
    const auto dtype = testing::dtype_for_seed(seed);
    const auto program = testing::make_random_projection(static_cast<std::uint64_t>(seed), dtype, at::kCPU);
    const auto problems = testing::rewritten_differences(
        program,
        [&](ir::Graph& graph) {
          weights_as_parameters(graph);
          programs_concatenated += rewrite(graph) > 0;
        },
        tolerance(dtype), worst);
    if (!problems.empty()) {
      ++failures;
      ADD_FAILURE() << "seed " << seed << "\n" << problems;
    }
  }
  std::printf("random projection rewrites: %d programs, %d with sibling products as one; largest error %.3f of the "
              "tolerance; %d failures\n",
              kPrograms, programs_concatenated, worst, failures);
  // About half the programs have siblings, in matmul's or addmm's form a third of the time each:
  // far fewer would mean the rewrite stopped taking the forms models write.
  EXPECT_GE(programs_concatenated, kPrograms / 10);
}

}  // namespace
}  // namespace zenith::passes
