// The convolution epilogue (passes/convolution_epilogue.h): conv -> batch norm (eval) -> [add] ->
// ReLU becomes one zenith::convolution_relu over the batch norm folded into the convolution's
// weight and bias, or, where that copy of the weight is too large to keep, one
// zenith::convolution_scale_relu with the batch norm as a per-channel scale and shift (16-bit,
// channels-last). On the CPU both ops run their written ops (core/convolution_relu.h,
// core/convolution_scale_relu.h), so the rewritten graph is checked against the original on fresh
// draws of every input, statistics and weights included (what a parameter update between calls
// gives the plan); tails the ops cannot take are left as written.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include "common_relative_error.h"
#include "core/convolution_relu.h"
#include "core/convolution_scale_relu.h"
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
void expect_same_results(const ir::Graph& before, const ir::Graph& after, const std::vector<at::Tensor>& examples,
                         double tolerance = 1e-5) {
  at::manual_seed(37);
  for (int draw = 0; draw < 2; ++draw) {
    std::vector<at::Tensor> inputs;
    for (const auto& example : examples) {
      inputs.push_back(example.dim() == 1 ? at::rand_like(example) + 0.5 : at::randn_like(example));
    }
    auto want = ir::interpret(before, inputs), got = ir::interpret(after, inputs);
    ASSERT_EQ(want.size(), got.size());
    for (std::size_t k = 0; k < want.size(); ++k) {
      EXPECT_LE(testing::relative_error(got[k].to(at::kFloat), want[k].to(at::kFloat)), tolerance)
          << "draw " << draw << ", output " << k;
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

int channels_last(GraphBuilder& b, int x) {
  return b.op("aten::contiguous", "",
              {value("self", x), {"memory_format", static_cast<std::int64_t>(at::MemoryFormat::ChannelsLast)}});
}

// A float16 (or `dtype`) tail whose folded weight is not kept: the weight has 288 elements against
// the result's 576, above kept_weight_fraction 0.1. `layout_last` lays the input, the weight and
// the residual out channels-last in the graph; `residual` adds a second input before the ReLU.
ir::Graph sixteen_bit_tail(GraphBuilder& b, c10::ScalarType dtype, bool layout_last, bool residual) {
  int x = b.input({kBatch, kIn, kSize, kSize}, dtype);
  int w = testing::cast(b, b.parameter({kOut, kIn, 3, 3}, "conv.weight"), dtype);
  auto norm = norm_parameters(b, "bn");
  for (int* p : {&norm.gamma, &norm.beta, &norm.mean, &norm.var}) *p = testing::cast(b, *p, dtype);
  if (layout_last) {
    x = channels_last(b, x);
    w = channels_last(b, w);
  }
  int out = batch_norm(b, convolution(b, x, w, 1), norm);
  if (residual) {
    int z = b.input({kBatch, kOut, kSize, kSize}, dtype);
    out = add(b, out, layout_last ? channels_last(b, z) : z);
  }
  return b.finish({relu(b, out)});
}

// Where the folded copy is not kept, a 16-bit channels-last tail gets the scale and shift in the
// epilogue: only two float32 vectors of the output's channels are derived, not a weight. On the
// CPU the op runs its written ops: the convolution rounded to float16, the affine, add and ReLU in
// float32, rounded once, as the batch norm computes its affine in float32 and rounds once too;
// the two orders of float32 arithmetic may round one value a float16 unit apart: 2^-10 of the
// largest output at most, hence 1e-3.
TEST(ConvolutionEpilogue, ASixteenBitChannelsLastWeightNotKeptGetsTheScaleAndShiftInTheEpilogue) {
  for (bool residual : {false, true}) {
    SCOPED_TRACE(residual ? "with a residual" : "without a residual");
    GraphBuilder b;
    const auto before = sixteen_bit_tail(b, at::kHalf, /*layout_last=*/true, residual);
    auto graph = before;
    PassReport report, removed;
    ConvolutionEpilogue(/*cuda_only=*/false, /*kept_fraction=*/0.1).run(graph, report);
    DeadCodeElimination().run(graph, removed);
    EXPECT_EQ(report.counters["fused"], 1);
    EXPECT_EQ(report.counters["scaled"], 1);
    EXPECT_EQ(report.counters["with_residual"], residual ? 1 : 0);
    EXPECT_EQ(report.counters["weight_too_large"], 0);
    EXPECT_EQ(testing::count_nodes(graph, ir::kConvolutionScaleReluOp), 1);
    EXPECT_EQ(testing::count_nodes(graph, ir::kConvolutionReluOp), 0);
    for (const char* gone : {"aten::_convolution", "aten::batch_norm", "aten::relu"}) {
      EXPECT_EQ(testing::count_nodes(graph, gone), 0) << gone;
    }
    for (const auto& node : graph.nodes) {
      if (node.op != ir::kConvolutionScaleReluOp) continue;
      for (const char* vector : {"scale", "shift"}) {
        const auto& type = graph.value(ir::tensor_arg(node, vector)).type;
        EXPECT_EQ(type.dtype, at::kFloat) << vector;
        EXPECT_EQ(type.sizes, std::vector<std::int64_t>{kOut}) << vector;
      }
    }
    EXPECT_NO_THROW(ir::verify(graph));
    EXPECT_EQ(graph.value(graph.outputs.front()).type, before.value(before.outputs.front()).type);
    expect_same_results(before, graph, b.example_inputs(), 1e-3);
  }
}

// Where cuDNN's fused graph would not take the tail (float32; an NCHW layout) or would not pay (a
// weight more than 10.5 times its result), the batch norm stays as written.
TEST(ConvolutionEpilogue, TheScaleAndShiftFormOnlyWhereCudnnTakesItAndItPays) {
  struct Case {
    const char* what;
    c10::ScalarType dtype;
    bool layout_last;
    double kept_fraction;
  };
  for (const auto& c : {Case{"float32", at::kFloat, true, 0.1}, Case{"NCHW", at::kHalf, false, 0.1},
                        Case{"a weight kept", at::kHalf, true, 0.5}}) {
    SCOPED_TRACE(c.what);
    GraphBuilder b;
    auto graph = sixteen_bit_tail(b, c.dtype, c.layout_last, /*residual=*/false);
    PassReport report;
    ConvolutionEpilogue(/*cuda_only=*/false, c.kept_fraction).run(graph, report);
    EXPECT_EQ(report.counters["scaled"], 0);
    EXPECT_EQ(testing::count_nodes(graph, ir::kConvolutionScaleReluOp), 0);
    // Kept (0.5: 288 <= 0.5 x 576), the copy is folded as before; else the batch norm stays.
    EXPECT_EQ(report.counters["fused"], c.kept_fraction == 0.5 ? 1 : 0);
    EXPECT_EQ(report.counters["weight_too_large"], c.kept_fraction == 0.5 ? 0 : 1);
  }
  // 64 output channels of 16 inputs, 3x3, on a 2 x 2 result: 9216 weights against 256 results.
  GraphBuilder b;
  int x = channels_last(b, b.input({1, 16, 2, 2}, at::kHalf));
  int w = channels_last(b, testing::cast(b, b.parameter({64, 16, 3, 3}, "wide.weight"), at::kHalf));
  auto norm = Norm{b.parameter({64}, "bn.weight"), b.parameter({64}, "bn.bias"), b.parameter({64}, "bn.running_mean"),
                   b.parameter({64}, "bn.running_var")};
  for (int* p : {&norm.gamma, &norm.beta, &norm.mean, &norm.var}) *p = testing::cast(b, *p, at::kHalf);
  auto graph = b.finish({relu(b, batch_norm(b, convolution(b, x, w, 1), norm))});
  PassReport report;
  ConvolutionEpilogue(/*cuda_only=*/false, 0.1).run(graph, report);
  EXPECT_EQ(report.counters["scaled"], 0);
  EXPECT_EQ(report.counters["weight_too_large"], 1);
}

// Where the input is channels-last and the weight is not (the channels-last rewrite keeps no copy
// of a weight this large against its result), ATen's convolution would copy the weight
// channels-last at every call: the batch norm is folded into that copy instead, by nodes marked to
// run at every call (ir::Node::per_call), and only the per-channel values are left for the plan to
// keep. Tolerances: in float32 as expect_same_results says; in float16 both ways round the output
// once (a unit, 2^-10 of the largest value, between them) and the folded weight rounds once more
// (half a unit a term, 2^-11 relative, which the sums average): 2e-3.
TEST(ConvolutionEpilogue, AWeightTheConvolutionWouldLayOutAtEveryCallIsFoldedThereInstead) {
  for (auto dtype : {at::kFloat, at::kHalf}) {
    for (bool residual : {false, true}) {
      SCOPED_TRACE(std::string(c10::toString(dtype)) + (residual ? ", with a residual" : ""));
      GraphBuilder b;
      int x = channels_last(b, b.input({kBatch, kIn, kSize, kSize}, dtype));
      const int parameter = b.parameter({kOut, kIn, 3, 3}, "conv.weight");
      const int w = dtype == at::kFloat ? parameter : testing::cast(b, parameter, dtype);
      auto norm = norm_parameters(b, "bn");
      if (dtype != at::kFloat) {
        for (int* p : {&norm.gamma, &norm.beta, &norm.mean, &norm.var}) *p = testing::cast(b, *p, dtype);
      }
      int out = batch_norm(b, convolution(b, x, w, 1), norm);
      if (residual) out = add(b, out, channels_last(b, b.input({kBatch, kOut, kSize, kSize}, dtype)));
      const auto before = b.finish({relu(b, out)});
      auto graph = before;
      PassReport report, removed;
      ConvolutionEpilogue(/*cuda_only=*/false, /*kept_fraction=*/0.1).run(graph, report);
      DeadCodeElimination().run(graph, removed);
      EXPECT_EQ(report.counters["fused"], 1);
      EXPECT_EQ(report.counters["folded_each_call"], 1);
      EXPECT_EQ(report.counters["scaled"], 0);
      EXPECT_EQ(report.counters["weight_too_large"], 0);
      EXPECT_EQ(report.counters["with_residual"], residual ? 1 : 0);
      EXPECT_EQ(testing::count_nodes(graph, ir::kConvolutionReluOp), 1);
      EXPECT_EQ(testing::count_nodes(graph, "aten::batch_norm"), 0);
      // Every node downstream of the weight runs at every call; the rest (the scale, the folded
      // bias) read the batch norm's vectors alone and are the plan's to keep.
      std::set<int> from_weight = {w};
      const ir::Node* fused = nullptr;
      for (const auto& node : graph.nodes) {
        if (node.op == ir::kConvolutionReluOp) {
          fused = &node;
          continue;
        }
        const auto ids = node.input_ids();
        const bool reads_weight = std::any_of(ids.begin(), ids.end(), [&](int id) { return from_weight.count(id) > 0; });
        if (reads_weight) from_weight.insert(node.outputs.begin(), node.outputs.end());
        EXPECT_EQ(node.per_call, reads_weight) << node.qualified_name();
      }
      ASSERT_NE(fused, nullptr);
      const int folded = ir::tensor_arg(*fused, "weight");
      EXPECT_TRUE(from_weight.count(folded)) << "the fused op reads the weight folded at every call";
      const auto& folded_type = graph.value(folded).type;
      EXPECT_EQ(folded_type.dtype, dtype);
      EXPECT_EQ(folded_type.strides, c10::get_channels_last_strides_2d(c10::IntArrayRef(folded_type.sizes)))
          << "laid out as the convolution reads it, by the fold's own kernel";
      EXPECT_FALSE(from_weight.count(ir::tensor_arg(*fused, "bias"))) << "the folded bias is kept";
      EXPECT_NO_THROW(ir::verify(graph));
      EXPECT_EQ(graph.value(graph.outputs.front()).type, before.value(before.outputs.front()).type);
      expect_same_results(before, graph, b.example_inputs(), dtype == at::kFloat ? 1e-5 : 2e-3);
    }
  }
}

// The op's written form: the convolution in the input's dtype, then scale, shift, add and ReLU in
// float32, rounded once. In float32, the same sums as the written ops and one multiply-add more
// rounded in another order: 1e-6 of the largest value.
TEST(ConvolutionEpilogue, TheScaledOpComputesConvolutionTimesScalePlusShiftPlusResidual) {
  at::manual_seed(47);
  auto x = at::randn({kBatch, kIn, kSize, kSize}).contiguous(at::MemoryFormat::ChannelsLast);
  auto w = at::randn({kOut, kIn, 3, 3});
  auto scale = at::rand({kOut}) + 0.5, shift = at::randn({kOut}), z = at::randn({kBatch, kOut, kSize, kSize});
  static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow(ir::kConvolutionScaleReluOp, "").typed<
      at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                 const std::optional<at::Tensor>&, at::IntArrayRef, at::IntArrayRef, at::IntArrayRef, int64_t, bool)>();
  auto per_channel = [](const at::Tensor& v) { return v.view({1, -1, 1, 1}); };
  auto got = op.call(x, w, scale, shift, z, {1, 1}, {1, 1}, {1, 1}, 1, true);
  auto want = at::relu(at::conv2d(x, w, std::nullopt, 1, 1) * per_channel(scale) + per_channel(shift) + z);
  EXPECT_LE(testing::relative_error(got, want), 1e-6);
  EXPECT_TRUE(got.is_contiguous(at::MemoryFormat::ChannelsLast)) << "laid out as the convolution's result";
  auto without = op.call(x, w, scale, shift, std::nullopt, {2, 2}, {0, 0}, {1, 1}, 1, true);
  const auto plain = at::conv2d(x, w, std::nullopt, at::IntArrayRef({2, 2}), at::IntArrayRef({0, 0}));
  EXPECT_LE(testing::relative_error(without, at::relu(plain * per_channel(scale) + per_channel(shift))), 1e-6);
  // float16: the convolution rounds to float16 first, as eager's does before its batch norm; the
  // result rounds once more (a float16 unit, 2^-11 relative, of the largest value: 1e-3).
  auto half = op.call(x.to(at::kHalf), w.to(at::kHalf), scale, shift, z.to(at::kHalf), {1, 1}, {1, 1}, {1, 1}, 1, true);
  EXPECT_EQ(half.scalar_type(), at::kHalf);
  const auto rounded = at::conv2d(x.to(at::kHalf), w.to(at::kHalf), std::nullopt, 1, 1).to(at::kFloat);
  const auto exact = at::relu(rounded * per_channel(scale) + per_channel(shift) + z.to(at::kHalf).to(at::kFloat));
  EXPECT_LE(testing::relative_error(half.to(at::kFloat), exact), 1e-3);
}

// The fused runner's check of a new plan (ir::convolution_scale_relu_disagreement) compares a block
// of 4096 pixels (16 channels) at a time: three blocks here, a fault planted in the second and
// the last.
TEST(ConvolutionEpilogue, TheDisagreementCheckFindsAnUnwrittenOrWrongElementInAnyBlock) {
  at::manual_seed(53);
  constexpr std::int64_t kImages = 3, kChannelsIn = 8, kChannelsOut = 16, kSide = 64;
  const auto cl = at::MemoryFormat::ChannelsLast;
  const auto x = at::randn({kImages, kChannelsIn, kSide, kSide}).to(at::kHalf).contiguous(cl);
  const auto w = (at::randn({kChannelsOut, kChannelsIn, 3, 3}) * 0.2).to(at::kHalf).contiguous(cl);
  const auto scale = at::rand({kChannelsOut}) + 0.5, shift = at::randn({kChannelsOut});
  const std::optional<at::Tensor> z = at::randn({kImages, kChannelsOut, kSide, kSide}).to(at::kHalf).contiguous(cl);
  const std::vector<std::int64_t> one = {1, 1};
  const ir::ScaledConvolution call{x, w, scale, shift, z, one, one, one, 1, false};
  const auto written = ir::convolution_scale_relu_written(call);
  EXPECT_EQ(ir::convolution_scale_relu_disagreement(call, written), "");
  // A fused kernel's way: the convolution's float32 sums scaled before any rounding. Within the
  // check's 1% of the largest magnitude (the two differ by float16 units, about 2^-11 relative).
  auto per_channel = [](const at::Tensor& v) { return v.view({1, -1, 1, 1}); };
  const auto sums = at::conv2d(x.to(at::kFloat), w.to(at::kFloat), std::nullopt, 1, 1);
  const auto fused = at::relu(sums * per_channel(scale) + per_channel(shift) + z->to(at::kFloat)).to(at::kHalf).contiguous(cl);
  EXPECT_EQ(ir::convolution_scale_relu_disagreement(call, fused), "");
  // Pixel (image 2, row 63, column 63) is the last of the third block; (1, 10, 7) is in the second.
  auto unwritten = fused.clone(cl);
  unwritten.index_put_({2, 15, 63, 63}, std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(ir::convolution_scale_relu_disagreement(call, unwritten), "it left outputs unwritten");
  auto wrong = fused.clone(cl);
  const double largest = written.abs().max().item<double>();
  wrong.index_put_({1, 5, 10, 7}, wrong.index({1, 5, 10, 7}) + 0.05 * largest);
  EXPECT_NE(ir::convolution_scale_relu_disagreement(call, wrong).find("exceeds 0.01 of the largest magnitude"),
            std::string::npos);
  const auto narrow = fused.narrow(3, 0, kSide - 1);
  EXPECT_NE(ir::convolution_scale_relu_disagreement(call, narrow).find("sizes"), std::string::npos);
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
