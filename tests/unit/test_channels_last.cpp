// The channels-last rewrite of training graphs (passes/autodiff/channels_last.cpp) on hand-built
// graphs: which convolutions get channels-last copies, that a value read twice is copied once,
// and when the rewrite declines. Types only: the graphs are built on the CPU and relabelled CUDA.
// test_training_cuda checks the gradients of the rewritten CNN against eager on the GPU.
#include <gtest/gtest.h>

#include <c10/core/MemoryFormat.h>

#include "graph_builders.h"
#include "passes/autodiff/channels_last.h"

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
  ASSERT_TRUE(autodiff::convolutions_channels_last(g));
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
      if (const auto* ref = std::get_if<ir::ValueRef>(&arg.value)) EXPECT_TRUE(defined[ref->id]) << node.op;
    }
    for (int out : node.outputs) defined[out] = true;
  }
}

TEST(ChannelsLast, DeclinesOnTheCpuForFourDimensionalOutputsAndEvalBatchNorm) {
  auto on_cpu = two_convolutions();
  for (auto& v : on_cpu.values) {
    if (v) v->type.device = c10::Device(c10::kCPU);
  }
  EXPECT_FALSE(autodiff::convolutions_channels_last(on_cpu));
  EXPECT_EQ(testing::count_nodes(on_cpu, "aten::contiguous"), 0);

  auto eval = two_convolutions(/*batch_norm_eval=*/true);
  EXPECT_FALSE(autodiff::convolutions_channels_last(eval));
  EXPECT_EQ(testing::count_nodes(eval, "aten::contiguous"), 0);

  auto four_d = two_convolutions();
  // The sum before the reduction as the output: four dimensions, laid out as eager lays it out.
  four_d.outputs = {four_d.nodes[2].outputs[0]};
  EXPECT_FALSE(autodiff::convolutions_channels_last(four_d));
}

}  // namespace
}  // namespace zenith
