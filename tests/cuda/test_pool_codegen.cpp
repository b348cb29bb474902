// The max-pooling code generator, without a GPU: max_pool2d compiles cleanly with NVRTC for sm_90
// in float32, float16 and bfloat16, channels-last or not, for the windows models use (ResNet's
// 3x3 stride 2 with padding, 2x2, ceil mode, dilation); keys follow the dtype, window and layout,
// never the sizes; launch arguments follow the documented layout and take the 16-byte path only
// where every vector is one aligned load; and what it cannot run says why. Numerics are checked
// against eager on the GPU (tests/gpu/test_jit_cuda_pool.cpp).
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <c10/core/MemoryFormat.h>

#include "backends/cuda/kernel_codegen.h"
#include "cuda/codegen_test_support.h"
#include "unit/graph_builders.h"

namespace zenith::cuda {
namespace {

using testing::GraphBuilder;
using testing::ints;
using testing::value;

struct Window {
  std::int64_t kernel = 3, stride = 2, padding = 1, dilation = 1;
  bool ceil_mode = false;
};

// One max_pool2d over x [N, C, H, W], built in float32 on the CPU and then typed as `dtype` on
// CUDA, channels-last when asked, as a plan's group would be.
ir::Graph max_pool(std::vector<std::int64_t> sizes, const Window& w, c10::ScalarType dtype, bool cl) {
  GraphBuilder b;
  int x = b.input(sizes);
  int out = b.op("aten::max_pool2d", "",
                 {value("self", x), ints("kernel_size", {w.kernel, w.kernel}), ints("stride", {w.stride, w.stride}),
                  ints("padding", {w.padding, w.padding}), ints("dilation", {w.dilation, w.dilation}),
                  {"ceil_mode", w.ceil_mode}});
  auto graph = codegen_test::on_cuda(b.finish({out}));
  for (auto& slot : graph.values) {
    if (!slot) continue;
    slot->type.dtype = dtype;
    if (cl) slot->type.strides = c10::get_channels_last_strides_2d(c10::IntArrayRef(slot->type.sizes));
  }
  return graph;
}

PoolKernel generate_or_fail(const ir::Graph& graph) { return codegen_test::generated_kernel<PoolKernel>(graph); }

TEST(PoolCodegen, MaxPoolCompilesForEveryDtypeLayoutAndWindow) {
  const std::vector<Window> windows = {{3, 2, 1, 1, false}, {2, 2, 0, 1, false}, {3, 2, 1, 1, true}, {3, 1, 1, 2, false}};
  for (auto dtype : {at::kFloat, at::kHalf, at::kBFloat16}) {
    for (bool cl : {false, true}) {
      for (const auto& w : windows) {
        SCOPED_TRACE(::testing::Message() << c10::toString(dtype) << (cl ? " channels-last" : " NCHW") << ", window "
                                          << w.kernel << " stride " << w.stride << " ceil " << w.ceil_mode);
        auto kernel = generate_or_fail(max_pool({2, 16, 15, 15}, w, dtype, cl));
        EXPECT_EQ(kernel.name.rfind("zenith_pool_", 0), 0u) << kernel.name;
        EXPECT_EQ(kernel.channels_innermost, cl);
        EXPECT_EQ(kernel.vector_width, dtype == at::kFloat ? 4 : 8);
        EXPECT_FALSE(kernel.index64);
        codegen_test::expect_compiles(kernel.source, kernel.name);
      }
    }
  }
}

TEST(PoolCodegen, KeysFollowDtypeWindowAndLayoutNotSizes) {
  const Window resnet;
  const auto key = [&](std::vector<std::int64_t> sizes, const Window& w, c10::ScalarType dtype, bool cl) {
    return generate_or_fail(max_pool(std::move(sizes), w, dtype, cl)).key;
  };
  const auto base = key({2, 16, 15, 15}, resnet, at::kHalf, true);
  EXPECT_EQ(base, key({4, 64, 112, 112}, resnet, at::kHalf, true));
  EXPECT_NE(base, key({2, 16, 15, 15}, resnet, at::kFloat, true));
  EXPECT_NE(base, key({2, 16, 15, 15}, resnet, at::kHalf, false));
  EXPECT_NE(base, key({2, 16, 15, 15}, Window{2, 2, 0, 1, false}, at::kHalf, true));
  EXPECT_NE(base, key({2, 16, 15, 15}, Window{3, 2, 1, 2, false}, at::kHalf, true));
}

TEST(PoolCodegen, ArgumentsFollowTheLayoutAndTheVectorPathNeedsAlignedChannels) {
  const auto kernel = generate_or_fail(max_pool({2, 16, 15, 15}, Window{}, at::kHalf, true));
  const auto cl = at::MemoryFormat::ChannelsLast;
  const auto half = at::TensorOptions().dtype(at::kHalf);
  auto in = at::zeros({2, 16, 15, 15}, half).contiguous(cl);
  auto out = at::zeros({2, 16, 8, 8}, half).contiguous(cl);
  auto din = codegen_test::view(in), dout = codegen_test::view(out);
  auto words = pack_pool_arguments(kernel, {&din, &dout});
  ASSERT_EQ(words.size(), 17u);
  EXPECT_EQ(std::vector<std::int64_t>(words.begin(), words.begin() + 7),
            (std::vector<std::int64_t>{2, 16, 15, 15, 8, 8, 1}));
  EXPECT_EQ(words[7], static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(in.data_ptr())));
  EXPECT_EQ(std::vector<std::int64_t>(words.begin() + 8, words.begin() + 12),
            (std::vector<std::int64_t>{16 * 15 * 15, 1, 15 * 16, 16}));
  EXPECT_EQ(std::vector<std::int64_t>(words.begin() + 13, words.end()),
            (std::vector<std::int64_t>{16 * 8 * 8, 1, 8 * 16, 16}));
  EXPECT_EQ(pool_work_items(kernel, words), 2 * 16 * 8 * 8 / 8);

  // One element past an aligned start: every vector straddles two loads, so element by element.
  auto storage = at::zeros({2 * 16 * 15 * 15 + 1}, half);
  auto shifted = storage.narrow(0, 1, 2 * 16 * 15 * 15).view({2, 15, 15, 16}).permute({0, 3, 1, 2});
  auto dshifted = codegen_test::view(shifted);
  words = pack_pool_arguments(kernel, {&dshifted, &dout});
  EXPECT_EQ(words[6], 0);
  EXPECT_EQ(pool_work_items(kernel, words), 2 * 16 * 8 * 8);

  // Twelve channels: no whole vector of eight.
  auto twelve_in = at::zeros({2, 12, 15, 15}, half).contiguous(cl);
  auto twelve_out = at::zeros({2, 12, 8, 8}, half).contiguous(cl);
  auto d12in = codegen_test::view(twelve_in), d12out = codegen_test::view(twelve_out);
  EXPECT_EQ(pack_pool_arguments(kernel, {&d12in, &d12out})[6], 0);

  // NCHW: the width is innermost, no vector path whatever the alignment.
  const auto nchw = generate_or_fail(max_pool({2, 16, 15, 15}, Window{}, at::kHalf, false));
  EXPECT_FALSE(nchw.channels_innermost);
  auto plain_in = at::zeros({2, 16, 15, 15}, half), plain_out = at::zeros({2, 16, 8, 8}, half);
  auto dpin = codegen_test::view(plain_in), dpout = codegen_test::view(plain_out);
  words = pack_pool_arguments(nchw, {&dpin, &dpout});
  EXPECT_EQ(words[6], 0);
  EXPECT_EQ(std::vector<std::int64_t>(words.begin() + 8, words.begin() + 12),
            (std::vector<std::int64_t>{16 * 15 * 15, 15 * 15, 15, 1}));
}

TEST(PoolCodegen, WhatItCannotRunSaysWhy) {
  // An unbatched image [C, H, W].
  GraphBuilder b;
  int x = b.input({16, 15, 15});
  int out = b.op("aten::max_pool2d", "",
                 {value("self", x), ints("kernel_size", {3, 3}), ints("stride", {2, 2}), ints("padding", {1, 1}),
                  ints("dilation", {1, 1}), {"ceil_mode", false}});
  EXPECT_NE(codegen_test::refusal(codegen_test::on_cuda(b.finish({out}))).find("[N, C, H, W] expected"),
            std::string::npos);

  // A result whose sizes the window does not give (a type that went wrong elsewhere) is not trusted.
  auto graph = max_pool({2, 16, 15, 15}, Window{}, at::kFloat, false);
  graph.value(graph.outputs.front()).type.sizes[3] = 7;
  EXPECT_NE(codegen_test::refusal(graph).find("where its window gives 8 in dimension 3"), std::string::npos)
      << codegen_test::refusal(graph);

  // Integers have no storage type of the generators.
  auto integers = max_pool({2, 16, 15, 15}, Window{}, at::kLong, false);
  EXPECT_NE(codegen_test::refusal(integers), "(generated)");
}

}  // namespace
}  // namespace zenith::cuda
