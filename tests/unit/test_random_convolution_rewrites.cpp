// The inference rewrites of convolution nets on seeded random convolution blocks
// (tests/common/random_convolution.h), on the CPU: each program is captured as compile() captures
// a callable; batch norms become arithmetic (passes/batch_norm_decomposition.h) and the
// convolutions run channels-last (capture/inference_layout.h), both told to act on CPU tensors
// (in a compile they act on CUDA ones); constant folding, common subexpressions and dead code
// follow; the graph is verified and the reference interpreter runs it on every draw of the inputs
// against eager on the same draw. The CUDA suite runs the same programs end to end
// (tests/gpu/test_random_fusion.cpp).
//
// Tolerances, as max |rewritten - eager| / max |eager|. The generator keeps eager in the dtype
// within 2e-6 (float32), 5e-3 (float16) or 2e-2 (bfloat16) of float64. float32 1e-4: a
// channels-last convolution sums in another order, and the decomposed batch norm rounds
// (x - mean) * scale + bias step by step where ATen's kernel fuses it; float16 2e-2 and bfloat16
// 8e-2: the decomposed batch norm rounds to the dtype after each of its ops, eager's once, four
// times the generator's bound as in the random programs' test.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "capture/inference_layout.h"
#include "common/program_checks.h"
#include "common/random_convolution.h"
#include "common/seed_offset.h"
#include "passes/batch_norm_decomposition.h"
#include "passes/common_subexpression_elimination.h"
#include "passes/constant_folding.h"
#include "passes/dead_code_elimination.h"

namespace zenith::passes {
namespace {

constexpr int kPrograms = 120;

double tolerance(c10::ScalarType dtype) { return dtype == at::kHalf ? 2e-2 : dtype == at::kBFloat16 ? 8e-2 : 1e-4; }

struct Rewritten {
  std::int64_t decomposed = 0;
  bool channels_last = false;
};

// The rewrites in the order an inference capture runs them: the layout first (at capture), then
// the passes.
Rewritten rewrite(ir::Graph& graph, const std::vector<at::Tensor>& inputs) {
  Rewritten done;
  std::string why;
  done.channels_last = capture::channels_last_for_inference(graph, inputs, why, /*cuda_only=*/false);
  PassReport report;
  BatchNormDecomposition(/*cuda_only=*/false).run(graph, report);
  done.decomposed = report.counters["decomposed"];
  ConstantFolding().run(graph, report);
  CommonSubexpressionElimination().run(graph, report);
  DeadCodeElimination().run(graph, report);
  return done;
}

TEST(RandomConvolutionRewrites, RewrittenGraphsMatchEagerOnEveryDraw) {
  at::NoGradGuard no_grad;
  int failures = 0, programs_decomposed = 0, programs_relaid = 0;
  double worst = 0;
  const int first = testing::first_seed();
  for (int seed = first; seed < first + kPrograms; ++seed) {
    const auto dtype = testing::dtype_for_seed(seed);
    const auto program = testing::make_random_convolution(static_cast<std::uint64_t>(seed), dtype, at::kCPU);
    const auto problems = testing::rewritten_differences(
        program,
        [&](ir::Graph& graph) {
          const auto done = rewrite(graph, program.inputs);
          programs_decomposed += done.decomposed > 0;
          programs_relaid += done.channels_last;
        },
        tolerance(dtype), worst);
    if (!problems.empty()) {
      ++failures;
      ADD_FAILURE() << "seed " << seed << "\n" << problems;
    }
  }
  std::printf("random convolution rewrites: %d programs, %d with batch norms as arithmetic, %d channels-last; "
              "largest error %.3f of the tolerance; %d failures\n",
              kPrograms, programs_decomposed, programs_relaid, worst, failures);
  // Most blocks have a batch norm, and most results are a global average (which lets the layout
  // change): far fewer would mean a rewrite stopped taking the layers nets are made of.
  EXPECT_GE(programs_decomposed, kPrograms / 2);
  EXPECT_GE(programs_relaid, kPrograms / 4);
}

}  // namespace
}  // namespace zenith::passes
