// The elementwise code generator, without a GPU: every kernel it makes compiles cleanly with
// NVRTC for sm_90, keys follow the shape class (not the sizes), and unsupported groups say why.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "backends/cuda/elementwise_codegen.h"
#include "backends/cuda/nvrtc_compiler.h"
#include "cuda/codegen_test_support.h"
#include "unit/graph_builders.h"

namespace zenith::cuda {
namespace {

using testing::GraphBuilder;
using testing::real;
using testing::scalar;
using testing::value;

using codegen_test::on_cuda;

ir::Graph chain(std::vector<std::int64_t> sizes, c10::ScalarType dtype, std::vector<std::int64_t> bias_sizes) {
  GraphBuilder b;
  int x = b.input(sizes, dtype);
  int bias = b.input(bias_sizes, dtype);
  int t = b.op("aten::mul", "Scalar", {value("self", x), real("other", 1.5)});
  int u = b.op("aten::add", "Tensor", {value("self", t), value("other", bias), scalar("alpha", 1)});
  int g = b.op("aten::gelu", "", {value("self", u), {"approximate", std::string("none")}});
  int y = b.op("aten::mul", "Tensor", {value("self", g), value("other", x)});
  return on_cuda(b.finish({y}));
}

// The same graph with its last dimension `width` long: only types change, no memory is allocated.
ir::Graph widened(ir::Graph graph, std::int64_t width) {
  for (auto& v : graph.values) {
    if (!v || v->type.sizes.empty()) continue;
    auto& type = v->type;
    type.sizes.back() = width;
    std::int64_t stride = 1;
    for (std::size_t d = type.sizes.size(); d-- > 0;) {
      type.strides[d] = stride;
      stride *= type.sizes[d];
    }
  }
  return graph;
}

ElementwiseKernel generate_or_fail(const ir::Graph& graph) {
  auto generated = generate_elementwise(graph);
  if (const auto* why = std::get_if<std::string>(&generated)) {
    ADD_FAILURE() << "not generated: " << *why;
    return {};
  }
  return std::get<ElementwiseKernel>(generated);
}

void expect_compiles(const ElementwiseKernel& kernel) { codegen_test::expect_compiles(kernel.source, kernel.name); }

TEST(ElementwiseCodegen, EveryDtypeAndLayoutCompiles) {
  for (auto dtype : {at::kFloat, at::kHalf, at::kBFloat16}) {
    expect_compiles(generate_or_fail(chain({64, 128}, dtype, {64, 128})));  // contiguous: vector path
    expect_compiles(generate_or_fail(chain({64, 128}, dtype, {128})));      // broadcast row
    expect_compiles(generate_or_fail(chain({64, 128}, dtype, {})));         // 0-d scalar tensor
  }
}

TEST(ElementwiseCodegen, WaitsForTheKernelBeforeAsItsFirstStatement) {
  // generated_kernel checks that the first statement waits, as follows_kernel_before says.
  auto kernel = codegen_test::generated_kernel<ElementwiseKernel>(chain({64, 128}, at::kHalf, {128}));
  EXPECT_FALSE(kernel.source.empty());
}

TEST(ElementwiseCodegen, EveryKnownOpCompiles) {
  GraphBuilder b;
  int x = b.input({8, 8});
  int y = b.input({8, 8});
  std::vector<int> outs;
  auto unary = [&](const char* op, std::vector<ir::Argument> extra = {}) {
    std::vector<ir::Argument> args{value("self", x)};
    args.insert(args.end(), extra.begin(), extra.end());
    outs.push_back(b.op(op, "", args));
  };
  for (const char* op : {"aten::neg", "aten::abs", "aten::exp", "aten::expm1", "aten::log", "aten::log1p", "aten::sqrt",
                         "aten::rsqrt", "aten::reciprocal", "aten::square", "aten::sin", "aten::cos", "aten::erf",
                         "aten::floor", "aten::ceil", "aten::round", "aten::tanh", "aten::sigmoid", "aten::silu",
                         "aten::mish", "aten::relu", "aten::relu6", "aten::hardswish", "aten::hardsigmoid"}) {
    unary(op);
  }
  unary("aten::clone", {testing::none("memory_format")});
  unary("aten::hardtanh", {real("min_val", -1.0), real("max_val", 1.0)});
  unary("aten::elu", {real("alpha", 1.0), scalar("scale", 1), scalar("input_scale", 1)});
  outs.push_back(b.op("aten::lerp", "Scalar", {value("self", x), value("end", y), real("weight", 0.3)}));
  outs.push_back(b.op("aten::addcmul", "", {value("self", x), value("tensor1", x), value("tensor2", y), real("value", 0.5)}));
  outs.push_back(b.op("aten::addcdiv", "", {value("self", x), value("tensor1", x), value("tensor2", y), real("value", 0.5)}));
  // Comparisons give bool tensors, which where and masked_fill read back.
  int mask = b.op("aten::gt", "Tensor", {value("self", x), value("other", y)});
  int low = b.op("aten::le", "Scalar", {value("self", x), real("other", 0.25)});
  int both = b.op("aten::logical_and", "", {value("self", mask), value("other", low)});
  outs.push_back(b.op("aten::where", "self", {value("condition", both), value("self", x), value("other", y)}));
  outs.push_back(b.op("aten::masked_fill", "Scalar", {value("self", x), value("mask", mask), real("value", -1e4)}));
  outs.push_back(both);
  unary("aten::gelu", {{"approximate", std::string("tanh")}});
  unary("aten::leaky_relu", {real("negative_slope", 0.1)});
  unary("aten::softplus", {scalar("beta", 1), scalar("threshold", 20)});
  unary("aten::clamp_min", {real("min", -0.5)});
  unary("aten::clamp_max", {real("max", 0.5)});
  unary("aten::clamp", {real("min", -1.0), real("max", 1.0)});
  outs.push_back(b.op("aten::pow", "Tensor_Scalar", {value("self", x), real("exponent", 2.0)}));
  outs.push_back(b.op("aten::pow", "Tensor_Scalar", {value("self", x), real("exponent", 1.7)}));
  outs.push_back(b.op("aten::pow", "Tensor_Tensor", {value("self", x), value("exponent", y)}));
  outs.push_back(b.op("aten::maximum", "", {value("self", x), value("other", y)}));
  outs.push_back(b.op("aten::minimum", "", {value("self", x), value("other", y)}));
  outs.push_back(b.op("aten::sub", "Tensor", {value("self", x), value("other", y), real("alpha", 2.0)}));
  outs.push_back(b.op("aten::div", "Tensor", {value("self", x), value("other", y)}));
  outs.push_back(b.op("aten::rsub", "Scalar", {value("self", x), scalar("other", 1), scalar("alpha", 1)}));
  outs.push_back(b.op("aten::div", "Scalar", {value("self", x), real("other", 3.0)}));
  // One group with every op, many outputs: exercises naming and multi-output stores too.
  expect_compiles(generate_or_fail(on_cuda(b.finish(outs))));
}

TEST(ElementwiseCodegen, KeysHoldTheShapeClassNotTheSizes) {
  auto a = generate_or_fail(chain({32, 100, 64}, at::kFloat, {64}));
  auto b = generate_or_fail(chain({32, 900, 64}, at::kFloat, {64}));  // another sequence length
  EXPECT_EQ(a.key, b.key);
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.source, b.source);
  EXPECT_NE(a.key, generate_or_fail(chain({32, 100, 64}, at::kHalf, {64})).key);       // dtype
  EXPECT_NE(a.key, generate_or_fail(chain({3200, 64}, at::kFloat, {64})).key);         // rank
  EXPECT_NE(a.key, generate_or_fail(chain({32, 100, 64}, at::kFloat, {100, 1})).key);  // broadcast pattern
  EXPECT_NE(a.key, generate_or_fail(chain({32, 100, 64}, at::kFloat, {32, 100, 64})).key);
  EXPECT_TRUE(generate_or_fail(chain({32, 100, 64}, at::kFloat, {32, 100, 64})).vectorized);
  // A bias along the rows varies along one dimension: an axis operand, on the vector path. One
  // that varies along two is strided, and keeps the kernel off it.
  EXPECT_TRUE(a.vectorized);
  EXPECT_EQ(a.classes[1], OperandClass::Axis);
  EXPECT_EQ(a.axes[1], 2);
  EXPECT_FALSE(generate_or_fail(chain({32, 100, 64}, at::kFloat, {32, 1, 64})).vectorized);
  EXPECT_FALSE(a.index64);
  EXPECT_TRUE(generate_or_fail(widened(chain({3, 4}, at::kFloat, {4}), 1 << 30)).index64);  // 3 * 2^30 elements
  // Just below 2^31 a grid-stride counter would pass 2^31 - 1 before its test: 64-bit too.
  EXPECT_TRUE(generate_or_fail(widened(chain({1, 4}, at::kFloat, {4}), (1LL << 31) - 1000)).index64);
  EXPECT_FALSE(generate_or_fail(widened(chain({1, 4}, at::kFloat, {4}), 1LL << 30)).index64);
}

TEST(ElementwiseCodegen, BoolResultsStayZeroOrOne) {
  GraphBuilder b;
  int m1 = b.input({8}, at::kBool), m2 = b.input({8}, at::kBool);
  int sum = b.op("aten::add", "Tensor", {value("self", m1), value("other", m2), scalar("alpha", 1)});
  int f = b.op("aten::_to_copy", "", {value("self", sum), scalar("dtype", static_cast<std::int64_t>(at::kFloat)),
                                     testing::none("layout"), testing::none("device"), testing::none("pin_memory"),
                                     {"non_blocking", false}, testing::none("memory_format")});
  auto kernel = generate_or_fail(on_cuda(b.finish({f})));
  // True + True is True: the add's result is clamped to 0/1 before the cast reads it.
  EXPECT_NE(kernel.source.find("const float t0 = ((a0 + a1) != 0.f ? 1.f : 0.f);"), std::string::npos) << kernel.source;
  expect_compiles(kernel);
}

TEST(ElementwiseCodegen, OutputsOfASmallerShapeAreStoredOnce) {
  GraphBuilder b;
  int x = b.input({16, 7, 8}), v = b.input({1, 7, 8});
  int t = b.op("aten::sigmoid", "", {value("self", v)});
  int y = b.op("aten::add", "Tensor", {value("self", x), value("other", t), scalar("alpha", 1)});
  auto kernel = generate_or_fail(on_cuda(b.finish({t, y})));
  EXPECT_EQ(kernel.shape_operand, 3) << "y, the larger output, is the iteration space";
  EXPECT_NE(kernel.source.find("if (w2) zn_store"), std::string::npos) << kernel.source;
  expect_compiles(kernel);
}

TEST(ElementwiseCodegen, UnsupportedGroupsSayWhy) {
  GraphBuilder b;
  int x = b.input({4, 4});
  int s = b.op("aten::softmax", "int", {value("self", x), scalar("dim", -1), testing::none("dtype")});
  auto reason = std::get<std::string>(generate_elementwise(on_cuda(b.finish({s}))));
  EXPECT_NE(reason.find("aten::softmax.int is not an elementwise op"), std::string::npos) << reason;

  GraphBuilder ints;
  int i = ints.input({4}, at::kLong);
  int n = ints.op("aten::neg", "", {value("self", i)});
  reason = std::get<std::string>(generate_elementwise(on_cuda(ints.finish({n}))));
  EXPECT_NE(reason.find("int64"), std::string::npos) << reason;

  GraphBuilder cpu;
  int c = cpu.input({4});
  int r = cpu.op("aten::relu", "", {value("self", c)});
  reason = std::get<std::string>(generate_elementwise(cpu.finish({r})));
  EXPECT_NE(reason.find("not CUDA"), std::string::npos) << reason;

  // A lone in-place write (Swin's attention mask is built with fill_ on slices) returns nothing.
  GraphBuilder writes;
  int w = writes.input({4});
  int fill = writes.input({});
  writes.op("aten::fill_", "Tensor", {value("self", w), value("value", fill)});
  reason = std::get<std::string>(generate_elementwise(on_cuda(writes.finish({}))));
  EXPECT_NE(reason.find("returns nothing: it only writes its inputs in place (aten::fill_)"), std::string::npos)
      << reason;
}

TEST(ElementwiseCodegen, ArgumentsFollowTheDocumentedLayout) {
  auto kernel = generate_or_fail(chain({4, 6}, at::kFloat, {6}));
  at::manual_seed(1);  // the values do not matter here, only the addresses and strides
  auto x = at::randn({4, 6}), bias = at::randn({6}), out = at::empty({4, 6});
  using codegen_test::view;
  DLTensor vx = view(x), vb = view(bias), vo = view(out);
  auto words = pack_arguments(kernel, {&vx, &vb, &vo});
  ASSERT_EQ(words.size(), 2u + 2u + 3u * (1u + 2u));
  EXPECT_EQ(words[0], 24);  // numel
  EXPECT_EQ(words[2], 4);
  EXPECT_EQ(words[3], 6);
  // bias: pointer, then strides over [4, 6]: broadcast row 0, then 1.
  EXPECT_EQ(words[4 + 3], static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(bias.data_ptr())));
  EXPECT_EQ(words[4 + 3 + 1], 0);
  EXPECT_EQ(words[4 + 3 + 2], 1);
}

// relu(x * scale + x) on [N, C, H, W] in channels-last memory with a [C, 1, 1] scale: the kernel
// iterates in memory order (N, H, W, C), where x and the output are contiguous.
ir::Graph channels_last_group() {
  GraphBuilder b;
  int x = b.input({2, 8, 5, 7}, at::kHalf);
  int scale = b.input({8, 1, 1}, at::kHalf);
  int t = b.op("aten::mul", "Tensor", {value("self", x), value("other", scale)});
  int u = b.op("aten::add", "Tensor", {value("self", t), value("other", x), scalar("alpha", 1)});
  int y = b.op("aten::relu", "", {value("self", u)});
  auto graph = on_cuda(b.finish({y}));
  for (auto& v : graph.values) {
    if (v && v->type.sizes.size() == 4) v->type.strides = {8 * 5 * 7, 1, 7 * 8, 8};
  }
  return graph;
}

TEST(ElementwiseCodegen, ChannelsLastIteratesInMemoryOrder) {
  auto kernel = generate_or_fail(channels_last_group());
  EXPECT_EQ(kernel.order, (std::vector<int>{0, 2, 3, 1}));
  ASSERT_EQ(kernel.classes.size(), 3u);
  EXPECT_EQ(kernel.classes[0], OperandClass::Contiguous);  // x
  EXPECT_EQ(kernel.classes[1], OperandClass::Axis);        // the broadcast scale, along C
  EXPECT_EQ(kernel.axes[1], 3) << "C is the innermost dimension in memory order";
  EXPECT_EQ(kernel.classes[2], OperandClass::Contiguous);  // the output
  expect_compiles(kernel);
  // Row-major groups keep their order (and their keys).
  EXPECT_TRUE(generate_or_fail(chain({64, 128}, at::kFloat, {128})).order.empty());

  // At launch, shape and strides come in memory order: [2, 5, 7, 8].
  at::manual_seed(2);  // the values do not matter here, only the shapes and strides
  auto x = at::randn({2, 8, 5, 7}).contiguous(at::MemoryFormat::ChannelsLast);
  auto scale = at::randn({8, 1, 1});
  auto out = at::empty_like(x);
  using codegen_test::view;
  DLTensor vx = view(x), vs = view(scale), vo = view(out);
  auto words = pack_arguments(kernel, {&vx, &vs, &vo});
  ASSERT_EQ(words.size(), 2u + 4u + 3u * (1u + 4u));
  EXPECT_EQ(std::vector<std::int64_t>(words.begin() + 2, words.begin() + 6), (std::vector<std::int64_t>{2, 5, 7, 8}));
  EXPECT_EQ(std::vector<std::int64_t>(words.begin() + 7, words.begin() + 11), (std::vector<std::int64_t>{280, 56, 8, 1}));
  EXPECT_EQ(std::vector<std::int64_t>(words.begin() + 12, words.begin() + 16), (std::vector<std::int64_t>{0, 0, 0, 1}));
  EXPECT_TRUE(takes_vector_path(kernel, words[1])) << "8 channels innermost: vectors of 8 start at channel 0";
}

// A relayout: a row-major [O, I, KH, KW] weight scaled per output channel and written
// channels-last, as the convolution epilogue folds a batch norm at every call. The kernel keeps
// row-major order (the weight is read in memory order) and each thread walks the KH x KW elements
// after the input-channel dimension, writing one element per step where its neighbours write the
// next ones. Where that run is long (a 16 x 16 image), the kernel iterates in the output's order.
ir::Graph relayout_group(std::vector<std::int64_t> sizes) {
  GraphBuilder b;
  int w = b.input(sizes, at::kFloat);
  int scale = b.input({sizes[0], 1, 1, 1}, at::kFloat);
  int t = b.op("aten::mul", "Tensor", {value("self", w), value("other", scale)});
  int y = b.op("aten::clone", "", {value("self", t), scalar("memory_format", static_cast<std::int64_t>(at::MemoryFormat::ChannelsLast))});
  return on_cuda(b.finish({y}));
}

TEST(ElementwiseCodegen, ARelayoutWalksRunsInTheInputsOrder) {
  const auto group = relayout_group({8, 4, 3, 3});
  ASSERT_EQ(group.value(group.outputs.front()).type.strides, (std::vector<std::int64_t>{36, 1, 12, 4}));
  auto kernel = generate_or_fail(group);
  EXPECT_EQ(kernel.run_dimension, 1) << "runs of the 3 x 3 elements after the input channels";
  EXPECT_TRUE(kernel.order.empty()) << "row-major: the weight's order";
  ASSERT_EQ(kernel.classes.size(), 3u);
  EXPECT_EQ(kernel.classes[0], OperandClass::Contiguous);  // the weight
  EXPECT_EQ(kernel.classes[1], OperandClass::Axis);        // the scale, along the output channels
  EXPECT_EQ(kernel.classes[2], OperandClass::Strided);     // the channels-last copy
  EXPECT_FALSE(kernel.vectorized);
  EXPECT_NE(kernel.key.find("runs after 1"), std::string::npos) << kernel.key;
  EXPECT_NE(kernel.source.find("const Index run ="), std::string::npos);
  // Divisions once a run: the run's leading coordinates; within it a counter steps the 3 x 3.
  EXPECT_NE(kernel.source.find("if (++q3 == (Index)p.sizes[3]) { q3 = 0; if (++q2 == (Index)p.sizes[2])"),
            std::string::npos)
      << kernel.source;
  expect_compiles(kernel);

  auto image = generate_or_fail(relayout_group({2, 3, 16, 16}));
  EXPECT_EQ(image.run_dimension, -1) << "a run of 256 elements";
  EXPECT_EQ(image.order, (std::vector<int>{0, 2, 3, 1}));
  EXPECT_EQ(image.key.find("runs after"), std::string::npos);
  expect_compiles(image);
}

// The float16 fold's own group: the weight widened, scaled in float32, rounded once and written
// channels-last (four nodes, results t0 to t3, which the run loop's counters must not shadow); and
// a rank-3 relayout whose output keeps its middle dimension innermost.
TEST(ElementwiseCodegen, RelayoutsOfEveryGroupShapeCompile) {
  GraphBuilder b;
  // A cast as the plan runs it (passes/cast_copies.h rewrites aten::to into this).
  auto cast = [&](int x, c10::ScalarType dtype) {
    return b.op("aten::_to_copy", "",
                {value("self", x), scalar("dtype", static_cast<std::int64_t>(dtype)), testing::none("layout"),
                 testing::none("device"), testing::none("pin_memory"), {"non_blocking", false},
                 testing::none("memory_format")});
  };
  int w = b.input({16, 8, 3, 3}, at::kHalf);
  int scale = b.input({16, 1, 1, 1}, at::kFloat);
  int t = b.op("aten::mul", "Tensor", {value("self", cast(w, at::kFloat)), value("other", scale)});
  int y = b.op("aten::clone", "",
               {value("self", cast(t, at::kHalf)),
                scalar("memory_format", static_cast<std::int64_t>(at::MemoryFormat::ChannelsLast))});
  auto fold = generate_or_fail(on_cuda(b.finish({y})));
  EXPECT_EQ(fold.run_dimension, 1);
  expect_compiles(fold);

  GraphBuilder c;
  int x = c.input({4, 6, 5}, at::kFloat);
  auto rank3 = on_cuda(c.finish({c.op("aten::relu", "", {value("self", x)})}));
  rank3.value(rank3.outputs.front()).type.strides = {30, 1, 6};  // [4, 5, 6] in memory
  auto kernel = generate_or_fail(rank3);
  EXPECT_EQ(kernel.run_dimension, 1) << "runs of the 5 elements after the innermost dimension";
  expect_compiles(kernel);
}

// The run loop is chosen by the sizes a kernel was generated for, and the kernel serves other
// sizes: a launch walks runs only where its run is within bounds (flags bit 2), and otherwise
// takes the element loop, one thread an element.
TEST(ElementwiseCodegen, ARelayoutWalksRunsOnlyWhereTheLaunchsRunIsShort) {
  const auto kernel = generate_or_fail(relayout_group({8, 4, 3, 3}));
  ASSERT_EQ(kernel.run_dimension, 1);
  using codegen_test::view;
  auto flags = [&](std::vector<std::int64_t> sizes) {
    auto w = at::empty(sizes), scale = at::empty({sizes[0], 1, 1, 1});
    auto out = at::empty_like(w, at::MemoryFormat::ChannelsLast);
    DLTensor vw = view(w), vs = view(scale), vo = view(out);
    const auto words = pack_arguments(kernel, {&vw, &vs, &vo});
    return std::pair{takes_run_path(kernel, words[1]), relayout_run(kernel, words)};
  };
  EXPECT_EQ(flags({8, 4, 3, 3}), std::pair(true, std::int64_t{9}));
  EXPECT_EQ(flags({64, 64, 7, 7}), std::pair(true, std::int64_t{49}));
  EXPECT_EQ(flags({8, 4, 9, 9}), std::pair(false, std::int64_t{81})) << "a run of 81: the element loop";
  EXPECT_EQ(flags({8, 4, 1, 1}), std::pair(false, std::int64_t{1})) << "runs of one element";
  EXPECT_NE(kernel.source.find("if (p.flags & 4)"), std::string::npos);
}

// The vector path reads an axis operand once per vector (a non-innermost axis) or V consecutive
// elements of it (an innermost one): only sizes that keep vectors aligned to the axis take it.
TEST(ElementwiseCodegen, AxisOperandsTakeTheVectorPathOnlyWhereTheSizesAllowIt) {
  using codegen_test::view;
  auto flags = [](const ElementwiseKernel& kernel, std::vector<std::int64_t> sizes, at::MemoryFormat format,
                  std::int64_t scale_stride = 1) {
    auto x = at::empty(sizes, at::kHalf).contiguous(format);
    auto scale = at::empty({sizes[1] * scale_stride, 1, 1}, at::kHalf).slice(0, 0, c10::nullopt, scale_stride);
    auto out = at::empty_like(x);
    DLTensor vx = view(x), vs = view(scale), vo = view(out);
    return takes_vector_path(kernel, pack_arguments(kernel, {&vx, &vs, &vo})[1]);
  };
  auto nchw = [](std::vector<std::int64_t> sizes) {
    GraphBuilder b;
    int x = b.input(sizes, at::kHalf);
    int scale = b.input({sizes[1], 1, 1}, at::kHalf);
    int y = b.op("aten::mul", "Tensor", {value("self", x), value("other", scale)});
    return generate_or_fail(on_cuda(b.finish({y})));
  };
  auto rows = nchw({2, 8, 4, 4});
  ASSERT_TRUE(rows.vectorized);
  EXPECT_EQ(rows.axes[1], 1);
  EXPECT_TRUE(flags(rows, {2, 8, 4, 4}, at::MemoryFormat::Contiguous)) << "16 elements per channel: whole vectors";
  EXPECT_FALSE(flags(rows, {2, 8, 7, 7}, at::MemoryFormat::Contiguous)) << "49 per channel: vectors straddle two";
  auto last = generate_or_fail(channels_last_group());
  EXPECT_TRUE(flags(last, {2, 16, 3, 3}, at::MemoryFormat::ChannelsLast));
  EXPECT_FALSE(flags(last, {2, 12, 3, 3}, at::MemoryFormat::ChannelsLast)) << "12 channels: vectors wrap around";
  EXPECT_FALSE(flags(last, {2, 16, 3, 3}, at::MemoryFormat::ChannelsLast, 2)) << "every other channel: no 16-byte load";
  EXPECT_TRUE(flags(rows, {2, 8, 4, 4}, at::MemoryFormat::Contiguous, 2)) << "read once per vector, any stride";
  expect_compiles(rows);
}

}  // namespace
}  // namespace zenith::cuda
