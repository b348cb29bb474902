// The row-reduction code generator, without a GPU: every reduction and normalization group (with
// elementwise prologues and epilogues) compiles cleanly with NVRTC for sm_90, keys follow the
// shape class (not the sizes), arguments follow the documented layout, and groups it cannot run
// say why, and 16-bit values a reduction reads are rounded as eager stores them. Numerics are
// checked against eager on the GPU (tests/gpu/test_jit_cuda_reductions.cpp).
#include <gtest/gtest.h>

#include <limits>
#include <set>
#include <sstream>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "backends/cuda/kernel_codegen.h"
#include "backends/cuda/nvrtc_compiler.h"
#include "cuda/codegen_test_support.h"
#include "unit/graph_builders.h"

namespace zenith::cuda {
namespace {

using testing::GraphBuilder;
using testing::ints;
using testing::none;
using testing::real;
using testing::scalar;
using testing::value;

ir::Argument flag(const std::string& name, bool v) { return {name, v}; }

using codegen_test::on_cuda;

ReductionKernel generate_or_fail(const ir::Graph& graph) {
  return codegen_test::generated_kernel<ReductionKernel>(on_cuda(graph));
}

std::string refusal(const ir::Graph& graph) { return codegen_test::refusal(on_cuda(graph)); }

void expect_compiles(const ReductionKernel& kernel) { codegen_test::expect_compiles(kernel.source, kernel.name); }

// y = layer_norm(x + residual) over the last dimension, with weight and bias.
ir::Graph layer_norm(std::vector<std::int64_t> sizes, c10::ScalarType dtype) {
  GraphBuilder b;
  int x = b.input(sizes, dtype), residual = b.input(sizes, dtype);
  int w = b.input({sizes.back()}, dtype), bias = b.input({sizes.back()}, dtype);
  int h = b.op("aten::add", "Tensor", {value("self", x), value("other", residual), scalar("alpha", 1)});
  int y = b.op("aten::layer_norm", "", {value("input", h), ints("normalized_shape", {sizes.back()}), value("weight", w),
                                       value("bias", bias), real("eps", 1e-5), flag("cudnn_enable", true)});
  return b.finish({h, y});
}

// softmax(scores * scale + mask) over the last dimension, the mask broadcast over batch and heads.
ir::Graph attention_softmax(std::vector<std::int64_t> sizes, c10::ScalarType dtype, bool log) {
  GraphBuilder b;
  int s = b.input(sizes, dtype);
  int mask = b.input({sizes[sizes.size() - 2], sizes.back()}, dtype);
  int scaled = b.op("aten::mul", "Scalar", {value("self", s), real("other", 0.125)});
  int masked = b.op("aten::add", "Tensor", {value("self", scaled), value("other", mask), scalar("alpha", 1)});
  int y = b.op(log ? "aten::log_softmax" : "aten::softmax", "int", {value("self", masked), scalar("dim", -1), none("dtype")});
  return b.finish({y});
}

// LLaMA's RMSNorm spelled out: x * rsqrt(mean(x^2, -1, keepdim) + eps) * weight.
ir::Graph rms_norm(std::vector<std::int64_t> sizes, c10::ScalarType dtype) {
  GraphBuilder b;
  int x = b.input(sizes, dtype), w = b.input({sizes.back()}, dtype);
  int sq = b.op("aten::pow", "Tensor_Scalar", {value("self", x), scalar("exponent", 2)});
  int mean = b.op("aten::mean", "dim", {value("self", sq), ints("dim", {-1}), flag("keepdim", true), none("dtype")});
  int eps = b.op("aten::add", "Scalar", {value("self", mean), real("other", 1e-6), scalar("alpha", 1)});
  int r = b.op("aten::rsqrt", "", {value("self", eps)});
  int n = b.op("aten::mul", "Tensor", {value("self", x), value("other", r)});
  int y = b.op("aten::mul", "Tensor", {value("self", n), value("other", w)});
  return b.finish({y});
}

TEST(ReductionCodegen, NormalizationsCompileInEveryDtype) {
  for (auto dtype : {at::kFloat, at::kHalf, at::kBFloat16}) {
    SCOPED_TRACE(c10::toString(dtype));
    expect_compiles(generate_or_fail(layer_norm({2, 5, 48}, dtype)));
    expect_compiles(generate_or_fail(attention_softmax({2, 3, 5, 5}, dtype, false)));
    expect_compiles(generate_or_fail(attention_softmax({2, 3, 5, 5}, dtype, true)));
    expect_compiles(generate_or_fail(rms_norm({2, 5, 48}, dtype)));
  }
}

TEST(ReductionCodegen, EveryReductionCompilesWithPrologueAndEpilogue) {
  GraphBuilder b;
  int x = b.input({4, 6, 8});
  int t = b.op("aten::mul", "Scalar", {value("self", x), real("other", 2.0)});
  std::vector<int> outs;
  outs.push_back(b.op("aten::sum", "dim_IntList", {value("self", t), ints("dim", {-1}), flag("keepdim", false), none("dtype")}));
  outs.push_back(b.op("aten::amax", "", {value("self", t), ints("dim", {-1}), flag("keepdim", false)}));
  outs.push_back(b.op("aten::amin", "", {value("self", t), ints("dim", {2}), flag("keepdim", false)}));
  outs.push_back(b.op("aten::var", "correction", {value("self", t), ints("dim", {-1}), scalar("correction", 1), flag("keepdim", false)}));
  outs.push_back(b.op("aten::std", "correction", {value("self", t), ints("dim", {-1}), scalar("correction", 0), flag("keepdim", false)}));
  int mean = b.op("aten::mean", "dim", {value("self", t), ints("dim", {-1}), flag("keepdim", true), none("dtype")});
  // The epilogue reads the per-row mean per element: x - mean, then a per-row value of it again.
  int centered = b.op("aten::sub", "Tensor", {value("self", t), value("other", mean), scalar("alpha", 1)});
  int peak = b.op("aten::amax", "", {value("self", centered), ints("dim", {-1}), flag("keepdim", true)});
  int scaled = b.op("aten::div", "Tensor", {value("self", centered), value("other", peak)});
  outs.push_back(mean);
  outs.push_back(scaled);
  auto kernel = generate_or_fail(b.finish(outs));
  expect_compiles(kernel);
  EXPECT_EQ(kernel.rank, 3);
  EXPECT_EQ(kernel.inner_rank, 1);
}

TEST(ReductionCodegen, WholeTensorAndMultiDimensionRows) {
  GraphBuilder whole;
  int x = whole.input({16, 33});
  int s = whole.op("aten::sum", "", {value("self", x), none("dtype")});
  auto kernel = generate_or_fail(whole.finish({s}));
  expect_compiles(kernel);
  EXPECT_EQ(kernel.inner_rank, 2);

  GraphBuilder two;
  int y = two.input({3, 4, 5, 6});
  int m = two.op("aten::mean", "dim", {value("self", y), ints("dim", {-2, -1}), flag("keepdim", true), none("dtype")});
  int d = two.op("aten::sub", "Tensor", {value("self", y), value("other", m), scalar("alpha", 1)});
  kernel = generate_or_fail(two.finish({d}));
  expect_compiles(kernel);
  EXPECT_EQ(kernel.inner_rank, 2);
}

TEST(ReductionCodegen, MaskedSoftmaxAndLateLayerNormWeightsCompile) {
  // masked_fill(mask, -inf) before a softmax: the constant becomes a bit pattern, not a refusal.
  GraphBuilder masked;
  int s = masked.input({2, 8, 8}), m = masked.input({8, 8}, at::kBool);
  int f = masked.op("aten::masked_fill", "Scalar", {value("self", s), value("mask", m),
                                                    real("value", -std::numeric_limits<double>::infinity())});
  int y = masked.op("aten::softmax", "int", {value("self", f), scalar("dim", -1), none("dtype")});
  auto kernel = generate_or_fail(masked.finish({y}));
  EXPECT_NE(kernel.source.find("__int_as_float(0xff800000)"), std::string::npos);
  expect_compiles(kernel);

  // A layer_norm weight that itself waits for a reduction is used only once it exists (one row).
  GraphBuilder late;
  int x = late.input({16}), v = late.input({16});
  int peak = late.op("aten::amax", "", {value("self", v), ints("dim", {-1}), flag("keepdim", true)});
  int w = late.op("aten::mul", "Tensor", {value("self", v), value("other", peak)});
  int ln = late.op("aten::layer_norm", "", {value("input", x), ints("normalized_shape", {16}), value("weight", w),
                                           none("bias"), real("eps", 1e-5), flag("cudnn_enable", true)});
  expect_compiles(generate_or_fail(late.finish({ln})));
}

// A 16-bit value a reduction reads is rounded to its dtype where it is computed (eager stores it
// so; over float16 scores plus -65504 the rounding decides a softmax), and only such a value: the
// scaled scores, read by nothing but the add, stay in float32 registers; float32 rounds nothing.
TEST(ReductionCodegen, SixteenBitRowsAreReadAsEagerHoldsThem) {
  const std::pair<c10::ScalarType, const char*> dtypes[] = {{at::kHalf, "zn_round_half("},
                                                            {at::kBFloat16, "zn_round_bf16("}};
  for (const auto& [dtype, rounding] : dtypes) {
    const auto kernel = generate_or_fail(attention_softmax({2, 3, 8, 40}, dtype, false));
    const auto body = kernel.source.substr(kernel.source.find("__global__"));
    // Each sweep over the row recomputes the prologue: one statement, repeated.
    std::set<std::string> statements;
    std::istringstream lines(body);
    for (std::string line; std::getline(lines, line);) {
      if (line.find(rounding) != std::string::npos) statements.insert(line.substr(line.find_first_not_of(' ')));
    }
    EXPECT_EQ(statements.size(), 1u) << c10::toString(dtype) << ": the masked scores alone\n" << body;
    expect_compiles(kernel);
  }
  const auto float32 = generate_or_fail(attention_softmax({2, 3, 8, 40}, at::kFloat, false)).source;
  const auto body = float32.substr(float32.find("__global__"));
  EXPECT_EQ(body.find("zn_round_"), std::string::npos) << body;
}

std::size_t occurrences(const std::string& text, const std::string& what) {
  std::size_t count = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++count;
  return count;
}

// Rows that take the vector path are read from memory once, a vector of four elements at a time:
// layer norm over x + residual sweeps three times (the mean, the variance, the store); on the
// vector path its contiguous inputs are loaded once (two vector loads) and its outputs stored a
// vector at a time, where the path for other rows loads each element in every sweep.
TEST(ReductionCodegen, ShortAlignedRowsAreReadOnceAVectorAtATime) {
  const auto kernel = generate_or_fail(layer_norm({32, 128, 768}, at::kHalf));
  const auto body = kernel.source.substr(kernel.source.find("__global__"));
  const auto condition = body.find("const bool vector_rows = row_length % 4 == 0");
  const auto branch = body.find("if (vector_rows) {");
  const auto other = body.find("} else {", branch);
  ASSERT_NE(condition, std::string::npos) << body;
  ASSERT_NE(branch, std::string::npos) << body;
  ASSERT_NE(other, std::string::npos) << body;
  const auto vector = body.substr(branch, other - branch), streamed = body.substr(other);
  EXPECT_EQ(occurrences(vector, "zn_load4("), 2u) << vector;
  EXPECT_EQ(occurrences(vector, "zn_store4("), 2u) << vector;
  EXPECT_EQ(occurrences(vector, "zn_load((p0 "), 0u) << vector;
  EXPECT_EQ(occurrences(vector, "zn_block_reduce("), 2u) << vector;
  EXPECT_EQ(occurrences(streamed, "zn_load((p0 "), 3u) << streamed;
  EXPECT_EQ(occurrences(streamed, "zn_load4("), 0u) << streamed;
  EXPECT_EQ(occurrences(streamed, "zn_block_reduce("), 2u) << streamed;
  expect_compiles(kernel);
}

// A group whose every full operand is strided (a transposed input and output) has no vector path.
TEST(ReductionCodegen, StridedRowsHaveNoVectorPath) {
  GraphBuilder b;
  int x = b.input({8, 64}, at::kFloat);
  int y = b.op("aten::softmax", "int", {value("self", x), scalar("dim", -1), none("dtype")});
  auto graph = b.finish({y});
  graph.value(x).type.strides = {1, 8};
  graph.value(y).type.strides = {1, 8};
  const auto kernel = generate_or_fail(graph);
  EXPECT_EQ(kernel.source.find("vector_rows"), std::string::npos) << kernel.source;
  expect_compiles(kernel);
}

TEST(ReductionCodegen, KeysHoldTheShapeClassNotTheSizes) {
  auto a = generate_or_fail(layer_norm({2, 100, 64}, at::kFloat));
  auto b = generate_or_fail(layer_norm({2, 900, 64}, at::kFloat));  // another sequence length
  EXPECT_EQ(a.key, b.key);
  EXPECT_EQ(a.source, b.source);
  EXPECT_EQ(a.key, generate_or_fail(layer_norm({7, 3, 768}, at::kFloat)).key);  // another width
  EXPECT_NE(a.key, generate_or_fail(layer_norm({2, 100, 64}, at::kHalf)).key);
  EXPECT_NE(a.key, generate_or_fail(layer_norm({200, 64}, at::kFloat)).key);  // rank
  auto s1 = generate_or_fail(attention_softmax({2, 4, 128, 128}, at::kFloat, false));
  EXPECT_EQ(s1.key, generate_or_fail(attention_softmax({2, 4, 77, 77}, at::kFloat, false)).key);
  EXPECT_NE(s1.key, generate_or_fail(attention_softmax({2, 4, 128, 128}, at::kFloat, true)).key);
  EXPECT_FALSE(s1.index64);
}

TEST(ReductionCodegen, UnsupportedGroupsSayWhy) {
  GraphBuilder leading;
  int x = leading.input({4, 6});
  int s = leading.op("aten::sum", "dim_IntList", {value("self", x), ints("dim", {0}), flag("keepdim", false), none("dtype")});
  EXPECT_NE(refusal(leading.finish({s})).find("trailing"), std::string::npos);

  GraphBuilder spaces;
  int a = spaces.input({4, 6}), c = spaces.input({4, 6, 2});
  int sa = spaces.op("aten::sum", "dim_IntList", {value("self", a), ints("dim", {-1}), flag("keepdim", true), none("dtype")});
  int sc = spaces.op("aten::sum", "dim_IntList", {value("self", c), ints("dim", {-1}), flag("keepdim", false), none("dtype")});
  int both = spaces.op("aten::add", "Tensor", {value("self", sa), value("other", sc), scalar("alpha", 1)});
  EXPECT_NE(refusal(spaces.finish({both})).find("different row spaces"), std::string::npos);

  // A per-row result without keepdim would broadcast against the wrong dimension.
  GraphBuilder flat;
  int y = flat.input({6, 6});
  int m = flat.op("aten::mean", "dim", {value("self", y), ints("dim", {-1}), flag("keepdim", false), none("dtype")});
  int bad = flat.op("aten::sub", "Tensor", {value("self", y), value("other", m), scalar("alpha", 1)});
  EXPECT_NE(refusal(flat.finish({bad})).find("without keepdim"), std::string::npos);

  GraphBuilder devices;
  int d0 = devices.input({4, 4});
  int d1 = devices.op("aten::softmax", "int", {value("self", d0), scalar("dim", -1), none("dtype")});
  auto split = on_cuda(devices.finish({d1}));
  split.value(d0).type.device = c10::Device(c10::kCUDA, 1);
  auto why = std::get<std::string>(generate_kernel(split));
  EXPECT_NE(why.find("is on cuda:1"), std::string::npos) << why;

  GraphBuilder cpu;
  int z = cpu.input({4, 4});
  int sm = cpu.op("aten::softmax", "int", {value("self", z), scalar("dim", -1), none("dtype")});
  auto cpu_graph = cpu.finish({sm});
  auto reason = std::get<std::string>(generate_kernel(cpu_graph));
  EXPECT_NE(reason.find("not CUDA"), std::string::npos) << reason;
}

using codegen_test::view;

TEST(ReductionCodegen, ArgumentsFollowTheDocumentedLayout) {
  GraphBuilder b;
  int x = b.input({2, 3, 8}), w = b.input({8});
  int mean = b.op("aten::mean", "dim", {value("self", x), ints("dim", {-1}), flag("keepdim", false), none("dtype")});
  int y = b.op("aten::mul", "Tensor", {value("self", x), value("other", w)});
  int peak = b.op("aten::amax", "", {value("self", y), ints("dim", {-1}), flag("keepdim", false)});
  auto kernel = generate_or_fail(b.finish({mean, peak}));
  ASSERT_EQ(kernel.operands.size(), 4u);
  at::manual_seed(1);  // the values do not matter here, only the addresses and strides
  auto tx = at::randn({2, 3, 8}), tw = at::randn({8}), tm = at::empty({2, 3}), tp = at::empty({2, 3});
  DLTensor vx = view(tx), vw = view(tw), vm = view(tm), vp = view(tp);
  auto words = pack_reduction_arguments(kernel, {&vx, &vw, &vm, &vp});
  ASSERT_EQ(words.size(), 2u + 3u + 4u * (1u + 3u));
  EXPECT_EQ(words[0], 6);  // rows
  EXPECT_EQ(words[1], 8);  // row length
  EXPECT_EQ(std::vector<std::int64_t>(words.begin() + 2, words.begin() + 5), (std::vector<std::int64_t>{2, 3, 8}));
  auto strides = [&](std::size_t k) { return std::vector<std::int64_t>(words.begin() + 5 + 4 * k + 1, words.begin() + 5 + 4 * k + 4); };
  EXPECT_EQ(strides(0), (std::vector<std::int64_t>{24, 8, 1}));
  EXPECT_EQ(strides(1), (std::vector<std::int64_t>{0, 0, 1}));  // the weight, broadcast over rows
  EXPECT_EQ(strides(2), (std::vector<std::int64_t>{3, 1, 0}));  // a per-row output, lined up with S's outer dims
  EXPECT_EQ(words[5 + 4], static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(tw.data_ptr())));
}

}  // namespace
}  // namespace zenith::cuda
