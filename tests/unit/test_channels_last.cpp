// The channels-last rewrite (passes/channels_last_convolutions.cpp) on hand-built graphs: which
// convolutions get channels-last copies, that a value read twice is copied once, and when the
// rewrite declines (types only: the graphs are built on the CPU and relabelled CUDA). Then the
// inference relayout (capture/inference_layout.h) run on the CPU: the types a run of the rewritten
// graph gives, results equal to the original graph's on fresh inputs, results laid out as eager's.
// test_training_cuda checks the gradients of the rewritten CNN against eager on the GPU,
// test_inference_rewrites_cuda a compiled classifier.
#include <gtest/gtest.h>

#include <tuple>

#include <c10/core/MemoryFormat.h>

#include "capture/inference_layout.h"
#include "common_relative_error.h"
#include "core/interpreter.h"
#include "graph_builders.h"
#include "passes/channels_last_convolutions.h"

namespace zenith {
namespace {

using testing::GraphBuilder;
using testing::ints;
using testing::none;
using testing::value;

std::vector<ir::Argument> conv_args(int input, int weight) {
  return {value("input", input), value("weight", weight), none("bias"), ints("stride", {1, 1}), ints("padding", {1, 1}),
          ints("dilation", {1, 1}), {"transposed", false}, ints("output_padding", {0, 0}), testing::scalar("groups", 1),
          {"benchmark", false}, {"deterministic", false}, {"cudnn_enabled", true}, {"allow_tf32", true}};
}

// x -> conv(w1) -> a, x -> conv(w2) -> b, a + b summed: x feeds two convolutions.
ir::Graph two_convolutions(bool batch_norm_eval = false) {
  GraphBuilder b;
  int x = b.input({2, 3, 8, 8});
  int w1 = b.parameter({4, 3, 3, 3}, "w1");
  int w2 = b.parameter({4, 3, 3, 3}, "w2");
  int a = b.op("aten::_convolution", "", conv_args(x, w1));
  int c = b.op("aten::_convolution", "", conv_args(x, w2));
  int sum = b.op("aten::add", "Tensor", {value("self", a), value("other", c), testing::scalar("alpha", 1)});
  if (batch_norm_eval) {
    int mean = b.parameter({4}, "mean");
    int var = b.parameter({4}, "var");
    sum = b.op("aten::batch_norm", "",
               {value("input", sum), none("weight"), none("bias"), value("running_mean", mean),
                value("running_var", var), {"training", false}, testing::real("momentum", 0.1),
                testing::real("eps", 1e-5), {"cudnn_enabled", true}});
  }
  int total = b.op("aten::sum", "", {value("self", sum), none("dtype")});
  auto g = b.finish({total});
  for (auto& v : g.values) {
    if (v) v->type.device = c10::Device(c10::kCUDA, 0);
  }
  return g;
}


TEST(ChannelsLast, ConvolutionsReadChannelsLastCopiesMadeOnce) {
  auto g = two_convolutions();
  ASSERT_TRUE(passes::convolutions_channels_last(g, /*training=*/true));
  // One copy of x (read by both) and one of each weight.
  EXPECT_EQ(testing::count_nodes(g, "aten::contiguous"), 3);
  for (const auto& node : g.nodes) {
    if (node.op == "aten::contiguous") {
      EXPECT_EQ(std::get<std::int64_t>(node.arg("memory_format")->value),
                static_cast<std::int64_t>(c10::MemoryFormat::ChannelsLast));
      const auto& type = g.value(node.outputs[0]).type;
      EXPECT_EQ(type.strides, c10::get_channels_last_strides_2d(c10::IntArrayRef(type.sizes)));
    }
    if (node.op != "aten::_convolution") continue;
    for (const char* operand : {"input", "weight"}) {
      int id = std::get<ir::ValueRef>(node.arg(operand)->value).id;
      const auto& type = g.value(id).type;
      EXPECT_EQ(type.strides, c10::get_channels_last_strides_2d(c10::IntArrayRef(type.sizes))) << operand;
    }
  }
  // Each copy comes before its first reader.
  std::vector<bool> defined(g.values.size(), false);
  for (int id : g.inputs) defined[id] = true;
  for (const auto& node : g.nodes) {
    for (const auto& arg : node.args) {
      if (const auto* ref = std::get_if<ir::ValueRef>(&arg.value)) {
        EXPECT_TRUE(defined[ref->id]) << node.op;
      }
    }
    for (int out : node.outputs) defined[out] = true;
  }
}

// In inference a weight's copy is kept between calls: only where the weight is small against the
// convolution's result (passes/kept_weight_copies.h). Each weight has 4 x 3 x 3 x 3 = 108 elements,
// each result 2 x 4 x 8 x 8 = 512. The call's tensor is copied regardless, and training copies
// every weight (a step's copies are not kept).
TEST(ChannelsLast, AnInferenceWeightLargeAgainstItsResultGetsNoCopy) {
  auto count_weight_copies = [](const ir::Graph& g) {
    int copies = 0;
    for (const auto& node : g.nodes) {
      if (node.op != "aten::contiguous") continue;
      copies += g.value(std::get<ir::ValueRef>(node.arg("self")->value).id).role == ir::ValueRole::Parameter;
    }
    return copies;
  };
  const std::tuple<double, bool, int> cases[] = {{0.2, false, 0}, {0.25, false, 2}, {0.2, true, 2}};
  for (auto [fraction, training, copies] : cases) {
    auto g = two_convolutions();
    ASSERT_TRUE(passes::convolutions_channels_last(g, training, /*cuda_only=*/true, fraction));
    EXPECT_EQ(count_weight_copies(g), copies) << "fraction " << fraction << (training ? ", training" : "");
    EXPECT_EQ(testing::count_nodes(g, "aten::contiguous"), copies + 1) << "fraction " << fraction;
  }
}

TEST(ChannelsLast, DeclinesOnTheCpuForFourDimensionalOutputsAndEvalBatchNorm) {
  auto on_cpu = two_convolutions();
  for (auto& v : on_cpu.values) {
    if (v) v->type.device = c10::Device(c10::kCPU);
  }
  EXPECT_FALSE(passes::convolutions_channels_last(on_cpu, /*training=*/true));
  EXPECT_EQ(testing::count_nodes(on_cpu, "aten::contiguous"), 0);

  auto eval = two_convolutions(/*batch_norm_eval=*/true);
  EXPECT_FALSE(passes::convolutions_channels_last(eval, /*training=*/true));
  EXPECT_EQ(testing::count_nodes(eval, "aten::contiguous"), 0);

  auto four_d = two_convolutions();
  // The sum before the reduction as the output: four dimensions, laid out as eager lays it out.
  four_d.outputs = {four_d.nodes[2].outputs[0]};
  EXPECT_FALSE(passes::convolutions_channels_last(four_d, /*training=*/true));
}

// An inference classifier's body: conv, eval batch norm, ReLU, conv, residual add, ReLU, global
// average pooling, flatten. The result has two dimensions; `flatten_from` 2 leaves three, which a
// channels-last run would lay out differently from eager.
ir::Graph classifier(std::int64_t flatten_from = 1) {
  GraphBuilder b;
  int x = b.input({2, 3, 8, 8});
  int w1 = b.parameter({8, 3, 3, 3}, "w1");
  int w2 = b.parameter({8, 8, 3, 3}, "w2");
  int mean = b.parameter({8}, "mean");
  int var = b.parameter({8}, "var");
  int a = b.op("aten::_convolution", "", conv_args(x, w1));
  int n = b.op("aten::batch_norm", "",
               {value("input", a), none("weight"), none("bias"), value("running_mean", mean), value("running_var", var),
                {"training", false}, testing::real("momentum", 0.1), testing::real("eps", 1e-5), {"cudnn_enabled", true}});
  int r = b.op("aten::relu", "", {value("self", n)});
  int c = b.op("aten::_convolution", "", conv_args(r, w2));
  int sum = b.op("aten::add", "Tensor", {value("self", c), value("other", r), testing::scalar("alpha", 1)});
  int out = b.op("aten::relu", "", {value("self", sum)});
  if (flatten_from == 1) out = b.op("aten::adaptive_avg_pool2d", "", {value("self", out), ints("output_size", {1, 1})});
  out = b.op("aten::flatten", "using_ints",
             {value("self", out), testing::scalar("start_dim", flatten_from), testing::scalar("end_dim", -1)});
  return b.finish({out});
}

// Fresh inputs for `g`: a random call tensor and parameters, variances positive.
std::vector<at::Tensor> draw_inputs(const ir::Graph& g) {
  std::vector<at::Tensor> inputs;
  for (int id : g.inputs) {
    const auto& v = g.value(id);
    auto t = at::randn(v.type.sizes);
    inputs.push_back(v.name == "var" ? t.abs() + 0.5 : t);
  }
  return inputs;
}

TEST(ChannelsLast, AnInferenceGraphRunsChannelsLastWithTheSameResults) {
  at::manual_seed(17);
  const auto original = classifier();
  auto relaid = original;
  std::string why;
  ASSERT_TRUE(capture::channels_last_for_inference(relaid, draw_inputs(original), why, /*cuda_only=*/false)) << why;
  EXPECT_TRUE(why.empty()) << why;
  // The call's tensor once and each weight: three copies.
  EXPECT_EQ(testing::count_nodes(relaid, "aten::contiguous"), 3);
  // Every 4-D value from the first convolution on is channels-last, as the run found it.
  for (const auto& node : relaid.nodes) {
    if (node.op != "aten::_convolution" && node.op != "aten::batch_norm" && node.op != "aten::relu" &&
        node.op != "aten::add") {
      continue;
    }
    const auto& type = relaid.value(node.outputs[0]).type;
    EXPECT_EQ(type.strides, c10::get_channels_last_strides_2d(c10::IntArrayRef(type.sizes))) << node.op;
  }
  const int result = relaid.outputs[0];
  EXPECT_EQ(relaid.value(result).type, original.value(original.outputs[0]).type) << "laid out as eager lays it out";
  // Two draws: the rewritten graph computes, it does not remember. The CPU's channels-last
  // convolution sums in another order than its NCHW one: float32 roundoff through two of them.
  for (int draw = 0; draw < 2; ++draw) {
    const auto inputs = draw_inputs(original);
    const auto want = ir::interpret(original, inputs).at(0);
    const auto got = ir::interpret(relaid, inputs).at(0);
    EXPECT_LT(testing::relative_error(got, want), 1e-5) << "draw " << draw;
    EXPECT_EQ(got.strides(), want.strides());
  }
}

TEST(ChannelsLast, AnInferenceGraphWhoseResultWouldChangeLayoutIsLeftAlone) {
  at::manual_seed(18);
  // flatten(2) of a channels-last [2, 8, 8, 8] is a view with other strides than eager's result.
  const auto original = classifier(/*flatten_from=*/2);
  auto relaid = original;
  std::string why;
  EXPECT_FALSE(capture::channels_last_for_inference(relaid, draw_inputs(original), why, /*cuda_only=*/false));
  EXPECT_NE(why.find("instead of eager's"), std::string::npos) << why;
  EXPECT_EQ(testing::count_nodes(relaid, "aten::contiguous"), 0) << "untouched";

  // On the CPU by default: nothing to rewrite, nothing to say.
  auto on_cpu = classifier();
  EXPECT_FALSE(capture::channels_last_for_inference(on_cpu, draw_inputs(on_cpu), why));
  EXPECT_TRUE(why.empty()) << why;
}

}  // namespace
}  // namespace zenith
