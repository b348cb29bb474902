// The convolution epilogue (passes/convolution_epilogue.h): conv -> batch norm (eval) -> [add] ->
// ReLU becomes one zenith::convolution_relu over the batch norm folded into the convolution's
// weight and bias. On the CPU the op runs the written ops (core/convolution_relu.h), so the
// rewritten graph is checked against the original on fresh draws of every input, statistics and
// weights included (what a parameter update between calls gives the plan); tails the op cannot
// take are left as written.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include "common_relative_error.h"
#include "core/convolution_relu.h"
#include "core/interpreter.h"
#include "core/node_arguments.h"
#include "core/verifier.h"
#include "graph_builders.h"
#include "passes/convolution_epilogue.h"
#include "passes/dead_code_elimination.h"

namespace zenith::passes {
namespace {

using testing::GraphBuilder;
using testing::ints;
using testing::none;
using testing::real;
using testing::scalar;
using testing::value;

constexpr std::int64_t kBatch = 2, kIn = 4, kOut = 8, kSize = 6;

struct Norm {
  int gamma, beta, mean, var;
};

Norm norm_parameters(GraphBuilder& b, const std::string& name) {
  return {b.parameter({kOut}, name + ".weight"), b.parameter({kOut}, name + ".bias"),
          b.parameter({kOut}, name + ".running_mean"), b.parameter({kOut}, name + ".running_var")};
}

int convolution(GraphBuilder& b, int x, int weight, std::int64_t padding, bool deterministic = false) {
  return b.op("aten::_convolution", "",
              {value("input", x), value("weight", weight), none("bias"), ints("stride", {1, 1}),
               ints("padding", {padding, padding}), ints("dilation", {1, 1}), {"transposed", false},
               ints("output_padding", {0, 0}), scalar("groups", 1), {"benchmark", false}, {"deterministic", deterministic},
               {"cudnn_enabled", true}, {"allow_tf32", true}});
}

int batch_norm(GraphBuilder& b, int x, const Norm& n, bool training = false) {
  return b.op("aten::batch_norm", "",
              {value("input", x), value("weight", n.gamma), value("bias", n.beta), value("running_mean", n.mean),
               value("running_var", n.var), {"training", training}, real("momentum", 0.1), real("eps", 1e-5),
               {"cudnn_enabled", true}});
}

int add(GraphBuilder& b, int x, int y, std::int64_t alpha = 1) {
  return b.op("aten::add", "Tensor", {value("self", x), value("other", y), scalar("alpha", alpha)});
}

int relu(GraphBuilder& b, int x) { return b.op("aten::relu", "", {value("self", x)}); }

// x -> 3x3 convolution (padding 1) -> batch norm -> ReLU; `b` keeps the example inputs.
ir::Graph convolution_norm_relu(GraphBuilder& b) {
  int x = b.input({kBatch, kIn, kSize, kSize});
  int w = b.parameter({kOut, kIn, 3, 3}, "conv.weight");
  return b.finish({relu(b, batch_norm(b, convolution(b, x, w, 1), norm_parameters(b, "bn")))});
}

PassReport rewritten(ir::Graph& graph) {
  PassReport report, removed;
  ConvolutionEpilogue(/*cuda_only=*/false).run(graph, report);
  DeadCodeElimination().run(graph, removed);
  return report;
}

// Every input drawn again, twice; running variances positive, as statistics are. 1e-5 of the
// output's largest magnitude: the folded weight rounds the batch norm's scale into each product
// term, which the written ops apply once to the sum.
void expect_same_results(const ir::Graph& before, const ir::Graph& after, const std::vector<at::Tensor>& examples) {
  at::manual_seed(37);
  for (int draw = 0; draw < 2; ++draw) {
    std::vector<at::Tensor> inputs;
    for (const auto& example : examples) {
      inputs.push_back(example.dim() == 1 ? at::rand_like(example) + 0.5 : at::randn_like(example));
    }
    auto want = ir::interpret(before, inputs), got = ir::interpret(after, inputs);
    ASSERT_EQ(want.size(), got.size());
    for (std::size_t k = 0; k < want.size(); ++k) {
      EXPECT_LE(testing::relative_error(got[k], want[k]), 1e-5) << "draw " << draw << ", output " << k;
    }
  }
}

TEST(ConvolutionEpilogue, ABatchNormAndReluFoldIntoTheConvolution) {
  GraphBuilder b;
  const auto before = convolution_norm_relu(b);
  auto graph = before;
  auto report = rewritten(graph);
  EXPECT_EQ(report.counters["fused"], 1);
  EXPECT_EQ(report.counters["with_residual"], 0);
  EXPECT_EQ(testing::count_nodes(graph, ir::kConvolutionReluOp), 1);
  for (const char* gone : {"aten::_convolution", "aten::batch_norm", "aten::relu"}) {
    EXPECT_EQ(testing::count_nodes(graph, gone), 0) << gone;
  }
  EXPECT_NO_THROW(ir::verify(graph));
  EXPECT_EQ(graph.value(graph.outputs.front()).type, before.value(before.outputs.front()).type);
  expect_same_results(before, graph, b.example_inputs());
}

// A ResNet block's last convolution: its batch norm, the shortcut's (itself a convolution and a
// batch norm) added, then the ReLU. One side folds into the fused op, the other is its residual.
TEST(ConvolutionEpilogue, AResidualAddIsTakenAlong) {
  GraphBuilder b;
  int x = b.input({kBatch, kIn, kSize, kSize});
  int w = b.parameter({kOut, kIn, 1, 1}, "conv3.weight");
  int w_down = b.parameter({kOut, kIn, 1, 1}, "downsample.weight");
  int main = batch_norm(b, convolution(b, x, w, 0), norm_parameters(b, "bn3"));
  int shortcut = batch_norm(b, convolution(b, x, w_down, 0), norm_parameters(b, "downsample_bn"));
  int out = relu(b, add(b, main, shortcut));
  const auto before = b.finish({out});
  auto graph = before;
  auto report = rewritten(graph);
  EXPECT_EQ(report.counters["fused"], 1);
  EXPECT_EQ(report.counters["with_residual"], 1);
  EXPECT_EQ(testing::count_nodes(graph, ir::kConvolutionReluOp), 1);
  EXPECT_EQ(testing::count_nodes(graph, "aten::_convolution"), 1) << "the shortcut's stays";
  EXPECT_EQ(testing::count_nodes(graph, "aten::batch_norm"), 1) << "the shortcut's stays";
  EXPECT_NO_THROW(ir::verify(graph));
  expect_same_results(before, graph, b.example_inputs());
}

// A folded weight is a copy the plan keeps: only where the weight is small against the ReLU's result
// (passes/kept_weight_copies.h). Here the weight has 8 x 4 x 3 x 3 = 288 elements, the result 2 x 8
// x 6 x 6 = 576.
TEST(ConvolutionEpilogue, AWeightLargeAgainstItsResultKeepsItsBatchNorm) {
  GraphBuilder b;
  const auto before = convolution_norm_relu(b);
  for (double fraction : {0.1, 0.49}) {
    auto graph = before;
    PassReport report;
    ConvolutionEpilogue(/*cuda_only=*/false, fraction).run(graph, report);
    EXPECT_EQ(report.counters["fused"], 0) << fraction;
    EXPECT_EQ(report.counters["weight_too_large"], 1) << fraction;
    EXPECT_EQ(testing::count_nodes(graph, "aten::batch_norm"), 1) << fraction;
    EXPECT_EQ(testing::count_nodes(graph, ir::kConvolutionReluOp), 0) << fraction;
  }
  auto graph = before;  // exactly half: 288 <= 0.5 x 576
  PassReport report;
  ConvolutionEpilogue(/*cuda_only=*/false, 0.5).run(graph, report);
  EXPECT_EQ(report.counters["fused"], 1);
  EXPECT_EQ(report.counters["weight_too_large"], 0);
  expect_same_results(before, graph, b.example_inputs());
}

TEST(ConvolutionEpilogue, LeavesTailsTheOpCannotTake) {
  GraphBuilder b;
  int x = b.input({kBatch, kIn, kSize, kSize});
  int z = b.input({kBatch, kOut, kSize, kSize});
  std::vector<int> outputs;
  auto weight = [&](const std::string& name) { return b.parameter({kOut, kIn, 3, 3}, name); };
  // The convolution's result is returned too.
  int returned = convolution(b, x, weight("a"), 1);
  outputs.push_back(relu(b, batch_norm(b, returned, norm_parameters(b, "a"))));
  outputs.push_back(returned);
  // A batch norm in training mode.
  outputs.push_back(relu(b, batch_norm(b, convolution(b, x, weight("b"), 1), norm_parameters(b, "b"), true)));
  // A residual scaled by the add.
  outputs.push_back(relu(b, add(b, batch_norm(b, convolution(b, x, weight("c"), 1), norm_parameters(b, "c")), z, 2)));
  // A deterministic convolution.
  outputs.push_back(relu(b, batch_norm(b, convolution(b, x, weight("d"), 1, true), norm_parameters(b, "d"))));
  // The batch norm's result read twice.
  int twice = batch_norm(b, convolution(b, x, weight("e"), 1), norm_parameters(b, "e"));
  outputs.push_back(add(b, relu(b, twice), twice));
  const auto before = b.finish(outputs);
  auto graph = before;
  auto report = rewritten(graph);
  EXPECT_EQ(report.counters["fused"], 0);
  EXPECT_EQ(graph.nodes.size(), before.nodes.size());
}

// In float16 the fold computes in float32 and rounds once: each folded weight and bias is within
// half a float16 unit in the last place (2^-11 relative) of the exact value. Rounding after each
// of rsqrt, * gamma and * W leaves several units, and the scale's error is one per channel (a
// bias of the whole channel, which grew to 11% over a random-weight ResNet-50's 53 layers).
TEST(ConvolutionEpilogue, AFloat16FoldRoundsOnce) {
  constexpr std::int64_t kChannels = 64;  // 64 scales and 64 x 4 x 3 x 3 weights: several units would show
  GraphBuilder b;
  int x = b.input({kBatch, kIn, kSize, kSize}, at::kHalf);
  auto half = [&](std::vector<std::int64_t> sizes, const std::string& name) {
    return testing::cast(b, b.parameter(std::move(sizes), name), at::kHalf);
  };
  int w = half({kChannels, kIn, 3, 3}, "conv.weight");
  const Norm norm{half({kChannels}, "bn.weight"), half({kChannels}, "bn.bias"), half({kChannels}, "bn.running_mean"),
                  half({kChannels}, "bn.running_var")};
  int out = relu(b, batch_norm(b, convolution(b, x, w, 1), norm));
  auto graph = b.finish({out});
  ASSERT_EQ(rewritten(graph).counters["fused"], 1);
  // The folded weight and bias the fused op reads, returned too.
  for (const auto& node : graph.nodes) {
    if (node.op != ir::kConvolutionReluOp) continue;
    graph.outputs.push_back(ir::tensor_arg(node, "weight"));
    graph.outputs.push_back(ir::tensor_arg(node, "bias"));
  }
  ASSERT_EQ(graph.outputs.size(), 3u);
  at::manual_seed(43);
  auto inputs = b.example_inputs();
  inputs[0] = at::randn({kBatch, kIn, kSize, kSize}).to(at::kHalf);
  const std::vector<std::string> names = {"conv.weight", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"};
  std::map<std::string, at::Tensor> drawn;
  for (std::size_t k = 0; k < names.size(); ++k) {
    // Values as float16 holds them, so that the exact fold below starts from the same numbers.
    auto value = names[k] == "bn.running_var" ? at::rand({kChannels}) * 4 + 0.01 : at::randn(inputs[k + 1].sizes());
    drawn[names[k]] = value.to(at::kHalf).to(at::kDouble);
    inputs[k + 1] = value.to(at::kHalf).to(at::kFloat);
  }
  auto got = ir::interpret(graph, inputs);
  const auto scale = drawn["bn.weight"] * at::rsqrt(drawn["bn.running_var"] + 1e-5);
  const auto exact_weight = drawn["conv.weight"] * scale.view({kChannels, 1, 1, 1});
  const auto exact_bias = drawn["bn.bias"] - drawn["bn.running_mean"] * scale;
  // Half a unit in the last place, relative; 2^-25 absolute for values float16 holds as subnormals.
  auto beyond_half_a_unit = [](const at::Tensor& folded, const at::Tensor& exact) {
    const auto error = (folded.to(at::kDouble) - exact).abs();
    return (error > exact.abs() * std::ldexp(1.0, -11) * (1 + 1e-6) + std::ldexp(1.0, -25)).sum().item<std::int64_t>();
  };
  EXPECT_EQ(got[1].scalar_type(), at::kHalf);
  EXPECT_EQ(beyond_half_a_unit(got[1], exact_weight), 0) << "folded weights more than half a unit from the exact fold";
  EXPECT_EQ(beyond_half_a_unit(got[2], exact_bias), 0) << "folded biases more than half a unit from the exact fold";
}

TEST(ConvolutionEpilogue, TheOpMatchesTheWrittenOps) {
  at::manual_seed(41);
  auto x = at::randn({kBatch, kIn, kSize, kSize});
  auto w = at::randn({kOut, kIn, 3, 3}), bias = at::randn({kOut}), z = at::randn({kBatch, kOut, kSize, kSize});
  static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow(ir::kConvolutionReluOp, "").typed<
      at::Tensor(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&, const std::optional<at::Tensor>&,
                 at::IntArrayRef, at::IntArrayRef, at::IntArrayRef, int64_t, bool)>();
  auto got = op.call(x, w, bias, z, {1, 1}, {1, 1}, {1, 1}, 1, true);
  auto want = at::relu(at::conv2d(x, w, bias, 1, 1) + z);
  // One convolution either way: the same sums; the add and the ReLU are exact.
  EXPECT_LE(testing::relative_error(got, want), 1e-6);
  auto without = op.call(x, w, std::nullopt, std::nullopt, {2, 2}, {0, 0}, {1, 1}, 1, true);
  const auto plain = at::conv2d(x, w, std::optional<at::Tensor>(), at::IntArrayRef({2, 2}), at::IntArrayRef({0, 0}));
  EXPECT_LE(testing::relative_error(without, at::relu(plain)), 1e-6);
  EXPECT_EQ(without.sizes(), at::IntArrayRef({kBatch, kOut, 2, 2}));
}

}  // namespace
}  // namespace zenith::passes
