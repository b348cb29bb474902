// Batch norm decomposition: inference batch norms become arithmetic that reads the statistics and
// affine parameters at every call, and fuses with what follows; the rewrite's results match
// ATen's batch_norm on values other than the ones the graph was built with.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "core/interpreter.h"
#include "core/verifier.h"
#include "graph_builders.h"
#include "passes/batch_norm_decomposition.h"
#include "passes/fusion.h"

namespace zenith::passes {
namespace {

using testing::GraphBuilder;
using testing::none;
using testing::real;
using testing::value;

std::vector<ir::Argument> batch_norm_args(int input, std::optional<int> weight, std::optional<int> bias, int mean,
                                          int var, bool training) {
  return {value("input", input),
          weight ? value("weight", *weight) : none("weight"),
          bias ? value("bias", *bias) : none("bias"),
          value("running_mean", mean),
          value("running_var", var),
          {"training", training},
          real("momentum", 0.1),
          real("eps", 1e-5),
          {"cudnn_enabled", true}};
}


// relu(bn(x) + residual) over [2, 4, 5, 5], and a batch norm without affine parameters over
// [3, 4]: the shapes of a convolution block and of a BatchNorm1d.
struct Network {
  ir::Graph graph;
  std::vector<at::Tensor> examples;
};

Network network() {
  GraphBuilder b;
  int x = b.input({2, 4, 5, 5});
  int residual = b.input({2, 4, 5, 5});
  int rows = b.input({3, 4});
  int weight = b.parameter({4}, "bn.weight");
  int bias = b.parameter({4}, "bn.bias");
  int mean = b.parameter({4}, "bn.running_mean");
  int var = b.parameter({4}, "bn.running_var");
  int mean1d = b.parameter({4}, "bn1d.running_mean");
  int var1d = b.parameter({4}, "bn1d.running_var");
  int normed = b.op("aten::batch_norm", "", batch_norm_args(x, weight, bias, mean, var, false));
  int sum = b.op("aten::add", "Tensor", {value("self", normed), value("other", residual), testing::scalar("alpha", 1)});
  int activated = b.op("aten::relu", "", {value("self", sum)});
  int normed1d = b.op("aten::batch_norm", "", batch_norm_args(rows, std::nullopt, std::nullopt, mean1d, var1d, false));
  auto graph = b.finish({activated, normed1d});
  return {std::move(graph), b.example_inputs()};
}

// Fresh values for every input, the statistics included; variances positive, as running
// variances are.
std::vector<at::Tensor> fresh_values(const ir::Graph& graph, const std::vector<at::Tensor>& examples) {
  std::vector<at::Tensor> values;
  for (std::size_t i = 0; i < examples.size(); ++i) {
    auto fresh = at::randn_like(examples[i]);
    if (graph.value(graph.inputs[i]).name.find("running_var") != std::string::npos) fresh = fresh.abs() + 0.1;
    values.push_back(fresh);
  }
  return values;
}

TEST(BatchNormDecomposition, InferenceBatchNormsBecomeArithmeticOverTheirLiveParameters) {
  auto [graph, examples] = network();
  auto before = graph;
  PassReport report;
  BatchNormDecomposition(/*cuda_only=*/false).run(graph, report);
  EXPECT_EQ(report.counters["decomposed"], 2);
  EXPECT_EQ(testing::count_nodes(graph, "aten::batch_norm"), 0);
  // Four views to [4, 1, 1] for the 4-d input; the 2-d one broadcasts as it is.
  EXPECT_EQ(testing::count_nodes(graph, "aten::view"), 4);
  EXPECT_EQ(testing::count_nodes(graph, "aten::rsqrt"), 2);
  EXPECT_NO_THROW(ir::verify(graph));
  // Three draws of every input, statistics and affine parameters included: they are read, not
  // remembered. 1e-5: (x - mean) * (invstd * weight) + bias rounds differently from ATen's order.
  at::manual_seed(5);
  for (int draw = 0; draw < 3; ++draw) {
    auto inputs = fresh_values(before, examples);
    auto want = ir::interpret(before, inputs), got = ir::interpret(graph, inputs);
    ASSERT_EQ(want.size(), got.size());
    for (std::size_t k = 0; k < want.size(); ++k) {
      EXPECT_TRUE(at::allclose(got[k], want[k], 1e-5, 1e-5)) << "draw " << draw << ", output " << k;
    }
  }
}

TEST(BatchNormDecomposition, KeepsTheDigitsOfInputsCloseToALargeMean) {
  // Calibrated statistics of a deep layer: activations around 1e4, a small variance. Folding the
  // mean into a shift (x * a + (bias - mean * a)) would cancel two numbers near 1e5 and keep 1e-3
  // of the result's relative precision; subtracting the mean first keeps float32's.
  auto [graph, examples] = network();
  auto before = graph;
  PassReport report;
  BatchNormDecomposition(/*cuda_only=*/false).run(graph, report);
  at::manual_seed(9);
  for (int draw = 0; draw < 2; ++draw) {
    auto inputs = fresh_values(before, examples);
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      const auto& name = before.value(before.inputs[i]).name;
      if (name == "bn.running_mean") inputs[i] = 1e4 + at::randn_like(inputs[i]);
      if (name == "bn.running_var") inputs[i] = 0.01 + at::rand_like(inputs[i]) * 0.01;
      if (i == 0) inputs[i] = 1e4 + at::randn_like(inputs[i]);  // x
    }
    // The reference in float64 (ATen's CPU kernel folds the mean into a shift itself).
    std::vector<at::Tensor> wide;
    for (const auto& input : inputs) wide.push_back(input.to(at::kDouble));
    auto want = ir::interpret(before, wide), got = ir::interpret(graph, inputs);
    const double scale = want[0].abs().max().item<double>();
    EXPECT_LE((got[0].to(at::kDouble) - want[0]).abs().max().item<double>() / scale, 1e-5) << "draw " << draw;
  }
}

TEST(BatchNormDecomposition, OnCudaTheBatchNormJoinsTheKernelOfWhatFollowsIt) {
  auto [graph, examples] = network();
  for (auto& v : graph.values) {
    if (v) v->type.device = c10::Device(c10::kCUDA, 0);
  }
  PassReport report;
  BatchNormDecomposition().run(graph, report);
  EXPECT_EQ(report.counters["decomposed"], 2);
  PassReport fusion;
  ElementwiseFusion().run(graph, fusion);
  // The 4-d batch norm's arithmetic with the residual add and the ReLU; the 2-d one alone.
  EXPECT_EQ(fusion.counters["groups"], 2);
  int unfused = 0;
  for (const auto& node : graph.nodes) unfused += node.fusion_group < 0 && node.op != "aten::view";
  EXPECT_EQ(unfused, 0) << "every arithmetic node is in a kernel";
}

TEST(BatchNormDecomposition, LeavesCpuTrainingAndMixedDtypeBatchNormsAlone) {
  auto [cpu_graph, examples] = network();
  PassReport report;
  BatchNormDecomposition().run(cpu_graph, report);
  EXPECT_EQ(report.counters["decomposed"], 0) << "on the CPU one batch_norm beats five ops";
  EXPECT_EQ(testing::count_nodes(cpu_graph, "aten::batch_norm"), 2);

  GraphBuilder b;
  int x = b.input({2, 4, 3, 3});
  int half = b.input({2, 4, 3, 3}, at::kBFloat16);
  int mean = b.parameter({4}, "mean");
  int var = b.parameter({4}, "var");
  int trained = b.op("aten::batch_norm", "", batch_norm_args(x, std::nullopt, std::nullopt, mean, var, true));
  // bfloat16 input, float32 statistics: x - mean would promote to float32; eager keeps bfloat16.
  int mixed = b.op("aten::batch_norm", "", batch_norm_args(half, std::nullopt, std::nullopt, mean, var, false));
  auto g = b.finish({trained, mixed});
  for (auto& v : g.values) {
    if (v) v->type.device = c10::Device(c10::kCUDA, 0);
  }
  BatchNormDecomposition().run(g, report);
  EXPECT_EQ(report.counters["decomposed"], 0);
  EXPECT_EQ(testing::count_nodes(g, "aten::batch_norm"), 2);
  EXPECT_EQ(testing::count_nodes(g, "aten::view"), 0) << "a refused rewrite leaves nothing behind";
  EXPECT_NO_THROW(ir::verify(g));
}

}  // namespace
}  // namespace zenith::passes
