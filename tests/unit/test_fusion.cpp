// Fusion: which nodes it groups (elementwise chains and the row reductions among them), that groups stay convex, and that fused groups run as
// one kernel (on the example plugin, which claims float32 elementwise groups) or split back when
// no backend claims them.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <limits>

#include <unistd.h>

#include <torch/torch.h>

#include "common/fresh_inputs.h"
#include "common/temp_folder.h"
#include "core/dump.h"
#include "graph_builders.h"
#include "passes/fusion.h"
#include "zenith/compile.h"

namespace zenith::passes {
namespace {

using testing::GraphBuilder;
using testing::real;
using testing::scalar;
using testing::value;

std::vector<int> groups_of(const ir::Graph& g) {
  std::vector<int> groups;
  for (const auto& node : g.nodes) groups.push_back(node.fusion_group);
  return groups;
}

TEST(Fusion, ChainsOfElementwiseOpsFormOneGroup) {
  auto g = testing::elementwise_chain();  // relu -> mul -> add
  PassReport report;
  ElementwiseFusion().run(g, report);
  EXPECT_EQ(groups_of(g), (std::vector<int>{0, 0, 0}));
  EXPECT_EQ(report.counters["groups"], 1);
  EXPECT_EQ(report.counters["fused_nodes"], 3);
}

// y = (x - m) * (rsqrt(v + eps) * w): the scale reads only parameters, so it starts a group of
// its own, which joins the group that reads it; read by a second group too, it stays apart.
TEST(Fusion, AGroupOfParameterArithmeticJoinsTheOneGroupReadingIt) {
  for (bool second_reader : {false, true}) {
    GraphBuilder b;
    int x = b.input({4, 8});
    int m = b.parameter({8}, "m"), v = b.parameter({8}, "v"), w = b.parameter({8}, "w");
    int centered = b.op("aten::sub", "Tensor", {value("self", x), value("other", m), scalar("alpha", 1)});
    int shifted = b.op("aten::add", "Scalar", {value("self", v), real("other", 1e-5), scalar("alpha", 1)});
    int root = b.op("aten::rsqrt", "", {value("self", shifted)});
    int scale = b.op("aten::mul", "Tensor", {value("self", root), value("other", w)});
    int y = b.op("aten::mul", "Tensor", {value("self", centered), value("other", scale)});
    std::vector<int> outputs = {y};
    if (second_reader) {
      // A chain of its own that reads the scale: the sigmoid starts at the input, the add joins it.
      int s = b.op("aten::sigmoid", "", {value("self", x)});
      outputs.push_back(b.op("aten::add", "Tensor", {value("self", s), value("other", scale), scalar("alpha", 1)}));
    }
    auto g = b.finish(outputs);
    PassReport report;
    ElementwiseFusion().run(g, report);
    if (!second_reader) {
      EXPECT_EQ(groups_of(g), (std::vector<int>{0, 0, 0, 0, 0})) << "one kernel";
      EXPECT_EQ(report.counters["groups"], 1);
    } else {
      EXPECT_EQ(report.counters["groups"], 3) << "the scale is materialized for its two readers";
      EXPECT_NE(g.nodes[0].fusion_group, g.nodes[1].fusion_group);
    }
  }
}

TEST(Fusion, LeadingReductionsViewsAndRandomOpsAreNotFused) {
  GraphBuilder b;
  int x = b.input({4, 8});
  int r = b.op("aten::relu", "", {value("self", x)});
  // A reduction over a leading dimension is no row reduction: rows would not be contiguous runs.
  int s = b.op("aten::sum", "dim_IntList", {value("self", r), testing::ints("dim", {0}), {"keepdim", true},
                                            testing::none("dtype")});
  int t = b.op("aten::transpose", "int", {value("self", s), scalar("dim0", 0), scalar("dim1", 1)});
  int d = b.op("aten::dropout", "", {value("self", t), real("p", 0.5), {"train", true}});
  int e = b.op("aten::exp", "", {value("self", d)});
  auto g = b.finish({e});
  PassReport report;
  ElementwiseFusion().run(g, report);
  EXPECT_EQ(groups_of(g), (std::vector<int>{-1, -1, -1, -1, -1}));  // no two fusible nodes touch
  EXPECT_EQ(report.counters["groups"], 0);
}

TEST(Fusion, GroupsStayConvex) {
  // relu feeds flip (not fusible) and add; flip feeds add too. relu and add in one group would
  // need flip both after and before that group.
  GraphBuilder b;
  int x = b.input({4, 8});
  int r = b.op("aten::relu", "", {value("self", x)});
  int s = b.op("aten::flip", "", {value("self", r), testing::ints("dims", {-1})});
  int a = b.op("aten::add", "Tensor", {value("self", r), value("other", s), scalar("alpha", 1)});
  int m = b.op("aten::mul", "Tensor", {value("self", a), value("other", a)});
  auto g = b.finish({m});
  PassReport report;
  ElementwiseFusion().run(g, report);
  auto groups = groups_of(g);
  EXPECT_EQ(groups[0], -1) << "relu must stay apart from add";
  EXPECT_GE(groups[2], 0);
  EXPECT_EQ(groups[2], groups[3]) << "add -> mul still fuse";
}

TEST(Fusion, RowReductionsJoinTheirElementwiseNeighbours) {
  GraphBuilder b;
  int x = b.input({2, 5, 16}), residual = b.input({2, 5, 16}), w = b.input({16});
  // RMSNorm spelled out after a residual add: one group of seven nodes.
  int h = b.op("aten::add", "Tensor", {value("self", x), value("other", residual), scalar("alpha", 1)});
  int sq = b.op("aten::pow", "Tensor_Scalar", {value("self", h), scalar("exponent", 2)});
  int mean = b.op("aten::mean", "dim", {value("self", sq), testing::ints("dim", {-1}), {"keepdim", true}, testing::none("dtype")});
  int eps = b.op("aten::add", "Scalar", {value("self", mean), real("other", 1e-6), scalar("alpha", 1)});
  int rs = b.op("aten::rsqrt", "", {value("self", eps)});
  int n = b.op("aten::mul", "Tensor", {value("self", h), value("other", rs)});
  int y = b.op("aten::mul", "Tensor", {value("self", n), value("other", w)});
  // A softmax over another row space starts a group of its own, with its epilogue.
  int t = b.op("aten::transpose", "int", {value("self", y), scalar("dim0", 1), scalar("dim1", 2)});
  int sm = b.op("aten::softmax", "int", {value("self", t), scalar("dim", -1), testing::none("dtype")});
  int out = b.op("aten::mul", "Scalar", {value("self", sm), real("other", 2.0)});
  auto g = b.finish({out});
  PassReport report;
  ElementwiseFusion().run(g, report);
  EXPECT_EQ(groups_of(g), (std::vector<int>{0, 0, 0, 0, 0, 0, 0, -1, 1, 1}));
  EXPECT_EQ(report.counters["groups"], 2);
}

TEST(Fusion, ReductionsOverDifferentRowsStayApart) {
  GraphBuilder b;
  int x = b.input({4, 6, 8});
  int r = b.op("aten::relu", "", {value("self", x)});
  int rows = b.op("aten::amax", "", {value("self", r), testing::ints("dim", {-1}), {"keepdim", true}});
  int planes = b.op("aten::amax", "", {value("self", r), testing::ints("dim", {-2, -1}), {"keepdim", true}});
  // The per-plane result read per element (keepdim broadcasting) joins the per-plane group.
  int other = b.input({4, 6, 8});
  int e = b.op("aten::add", "Tensor", {value("self", planes), value("other", other), scalar("alpha", 1)});
  auto g = b.finish({rows, e});
  PassReport report;
  ElementwiseFusion().run(g, report);
  auto groups = groups_of(g);
  EXPECT_EQ(groups[0], groups[1]) << "relu feeds the per-row amax";
  EXPECT_NE(groups[2], groups[0]) << "the per-plane amax reads other rows";
  EXPECT_EQ(groups[3], groups[2]);
}

TEST(Fusion, MatrixProductsTakeTheirEpilogueOnly) {
  GraphBuilder b;
  int x = b.input({8, 16}), w = b.input({32, 16}), bias = b.input({32}), m = b.input({16, 32});
  // linear with bias, then relu: one group; the mul after it starts another.
  int l = b.op("aten::linear", "", {value("input", x), value("weight", w), value("bias", bias)});
  int r = b.op("aten::relu", "", {value("self", l)});
  int s = b.op("aten::mul", "Scalar", {value("self", r), real("other", 2.0)});
  int n = b.op("aten::neg", "", {value("self", s)});
  // mm, then a row bias, then tanh-GELU: one group of three.
  int mm = b.op("aten::mm", "", {value("self", x), value("mat2", m)});
  int biased = b.op("aten::add", "Tensor", {value("self", mm), value("other", bias), scalar("alpha", 1)});
  int g = b.op("aten::gelu", "", {value("self", biased), {"approximate", std::string("tanh")}});
  // erf GELU is no epilogue, and a product the graph returns keeps no epilogue either.
  int mm2 = b.op("aten::mm", "", {value("self", x), value("mat2", m)});
  int e = b.op("aten::gelu", "", {value("self", mm2), {"approximate", std::string("none")}});
  int mm3 = b.op("aten::mm", "", {value("self", x), value("mat2", m)});
  int r3 = b.op("aten::relu", "", {value("self", mm3)});
  auto graph = b.finish({n, g, e, mm3, r3});
  PassReport report;
  ElementwiseFusion().run(graph, report);
  auto groups = groups_of(graph);
  EXPECT_GE(groups[0], 0);
  EXPECT_EQ(groups[0], groups[1]) << "linear + relu";
  EXPECT_NE(groups[2], groups[1]);
  EXPECT_EQ(groups[2], groups[3]) << "mul + neg fuse as usual";
  EXPECT_GE(groups[4], 0);
  EXPECT_EQ(groups[4], groups[5]);
  EXPECT_EQ(groups[5], groups[6]) << "mm + bias + gelu(tanh)";
  EXPECT_EQ(groups[7], -1) << "mm alone";
  EXPECT_EQ(groups[9], -1) << "a returned product keeps its relu apart";
}

// Attention whose additive mask is data, as attention fusion leaves it: the fused node over query
// [1, 4, rows, head], key and value [1, 4, 40, head] and a mask [1, 1, rows, 40], then
// attention_blind_rows over its result and the same operands (with `other_query`, over another
// query of the same shape). Returns the blind rows' result.
int attention_then_blind_rows(GraphBuilder& b, std::int64_t rows, std::int64_t head, bool other_query = false) {
  int q = b.input({1, 4, rows, head}), k = b.input({1, 4, 40, head}), v = b.input({1, 4, 40, head});
  int mask = b.input({1, 1, rows, 40});
  int blind_query = other_query ? b.input({1, 4, rows, head}) : q;
  int fused = b.op("aten::scaled_dot_product_attention", "",
                   {value("query", q), value("key", k), value("value", v), value("attn_mask", mask),
                    real("dropout_p", 0.0), {"is_causal", false}, real("scale", 0.125), {"enable_gqa", false}});
  return b.op("zenith::attention_blind_rows", "",
              {value("attention", fused), value("query", blind_query), value("key", k), value("value", v),
               value("attn_mask", mask), real("scale", 0.125)});
}

// The attention and its blind rows, then a scaling. A decode step's few query rows a head: the two
// attention nodes form a group that nothing joins (one kernel computes both on the JIT CUDA
// backend); a prompt's rows: nothing groups them, so each stays on the kernel made for it
// (PyTorch's fused attention, the light blind-rows kernel).
TEST(Fusion, ADecodeStepsAttentionAndItsBlindRowsFormAGroupOfTheirOwn) {
  for (std::int64_t rows : {std::int64_t{8}, std::int64_t{16}, std::int64_t{17}, std::int64_t{128}}) {
    SCOPED_TRACE(::testing::Message() << rows << " query rows a head");
    GraphBuilder b;
    int blind = attention_then_blind_rows(b, rows, 64);
    int scaled = b.op("aten::mul", "Scalar", {value("self", blind), real("other", 2.0)});
    int shifted = b.op("aten::add", "Scalar", {value("self", scaled), real("other", 1.0), scalar("alpha", 1)});
    auto graph = b.finish({shifted});
    PassReport report;
    ElementwiseFusion().run(graph, report);
    const auto groups = groups_of(graph);
    if (rows <= 16) {
      EXPECT_GE(groups[0], 0);
      EXPECT_EQ(groups[0], groups[1]) << "the attention and its blind rows";
    } else {
      EXPECT_EQ(groups[0], -1);
      EXPECT_EQ(groups[1], -1);
    }
    EXPECT_GE(groups[2], 0);
    EXPECT_NE(groups[2], groups[1]) << "the scaling after them is a group of its own";
    EXPECT_EQ(groups[2], groups[3]);
  }
}

// A decode step's attention over heads the decode kernel does not take (80 elements: not a power
// of two of 16-byte slices; 256: wider than 128): no group, so that the blind rows keep their own
// light kernel while PyTorch's kernels run the attention.
TEST(Fusion, AttentionOverHeadsTheDecodeKernelDoesNotTakeKeepsItsBlindRowsApart) {
  for (std::int64_t head : {std::int64_t{64}, std::int64_t{80}, std::int64_t{256}}) {
    SCOPED_TRACE(::testing::Message() << "a head of " << head);
    GraphBuilder b;
    auto graph = b.finish({attention_then_blind_rows(b, 1, head)});
    PassReport report;
    ElementwiseFusion().run(graph, report);
    const auto groups = groups_of(graph);
    if (head == 64) {
      EXPECT_GE(groups[0], 0);
      EXPECT_EQ(groups[0], groups[1]);
    } else {
      EXPECT_EQ(groups, (std::vector<int>{-1, -1}));
    }
  }
}

// Blind rows that read another query than the attention's are not its blind rows: no group.
TEST(Fusion, BlindRowsOverOtherOperandsStayApartFromTheAttention) {
  GraphBuilder b;
  auto graph = b.finish({attention_then_blind_rows(b, 1, 64, /*other_query=*/true)});
  PassReport report;
  ElementwiseFusion().run(graph, report);
  EXPECT_EQ(groups_of(graph), (std::vector<int>{-1, -1}));
}

TEST(Fusion, ABiasOfAnotherDtypeIsNoEpilogueButFusesWithTheCastAfterIt) {
  GraphBuilder b;
  int x = b.input({8, 16}, at::kBFloat16), m = b.input({16, 32}, at::kBFloat16), bias = b.input({32});
  // Autocast's linear in LibTorch: the float32 bias promotes the bfloat16 product's sum, cast back.
  int mm = b.op("aten::mm", "", {value("self", x), value("mat2", m)});
  int promoted = b.op("aten::add", "Tensor", {value("self", mm), value("other", bias), scalar("alpha", 1)});
  int rounded = b.op("aten::_to_copy", "",
                     {value("self", promoted), scalar("dtype", static_cast<std::int64_t>(at::kBFloat16)),
                      testing::none("layout"), testing::none("device"), testing::none("pin_memory"),
                      {"non_blocking", false}, testing::none("memory_format")});
  auto graph = b.finish({rounded});
  PassReport report;
  ElementwiseFusion().run(graph, report);
  auto groups = groups_of(graph);
  EXPECT_EQ(groups[0], -1) << "the product alone: an epilogue would round once where eager rounds twice";
  EXPECT_GE(groups[1], 0);
  EXPECT_EQ(groups[1], groups[2]) << "the promoted add and its cast, one elementwise kernel";
}

TEST(Fusion, APerRowResultWithoutKeepdimStaysOutOfTheElementwiseEpilogue) {
  GraphBuilder b;
  int x = b.input({1, 16});
  int peak = b.op("aten::amax", "", {value("self", x), testing::ints("dim", {-1}), {"keepdim", false}});
  int d = b.op("aten::sub", "Tensor", {value("self", x), value("other", peak), scalar("alpha", 1)});
  auto g = b.finish({d});
  PassReport report;
  ElementwiseFusion().run(g, report);
  EXPECT_EQ(groups_of(g), (std::vector<int>{-1, -1})) << "[1] broadcasts against [1, 16] by its last dimension";
}

TEST(Fusion, GroupSizeIsBounded) {
  GraphBuilder b;
  int v = b.input({16});
  for (int i = 0; i < 10; ++i) v = b.op("aten::neg", "", {value("self", v)});
  auto g = b.finish({v});
  PassReport report;
  ElementwiseFusion(/*max_nodes=*/4).run(g, report);
  EXPECT_EQ(report.counters["groups"], 3);  // 4 + 4 + 2
  EXPECT_EQ(report.counters["fused_nodes"], 10);
}

CompileOptions with_example_plugin() {
  CompileOptions options;
  options.plugin_paths = {ZENITH_EXAMPLE_PLUGIN_DIR};
  options.fallback_to_eager = false;
  return options;
}

using zenith::testing::call_name;
using zenith::testing::kCallsPerSignature;

// The end-to-end tests below compare with eager on fresh standard-normal inputs at every call of
// their signature: the capture, then replays of the plan. Their tolerance, allclose's 1e-6 + 1e-6
// |eager|, where not said otherwise: the example plugin evaluates each op in float32 with the C
// library's exp and tanh where ATen uses its vectorized ones (both within about 1 ulp) and may
// contract a multiply-add into one rounding; over a chain of a few ops of slope at most about 1
// that is a few ulps (1.2e-7 each) of values of order one. A kernel run out of order, or a value
// remembered from the capture, is off by order one.

TEST(FusionEndToEnd, AFusedGroupRunsAsOneKernel) {
  torch::manual_seed(10);
  torch::NoGradGuard no_grad;
  auto fn = [](at::Tensor x, at::Tensor y) { return torch::sigmoid(torch::relu(x) * y + x) - y; };
  auto fast = compile(fn, with_example_plugin());
  for (int call = 0; call < kCallsPerSignature; ++call) {
    auto x = torch::randn({33, 17}), y = torch::randn({33, 17});
    EXPECT_TRUE(torch::allclose(fast(x, y), fn(x, y), 1e-6, 1e-6)) << call_name(call);
  }
  auto report = fast.report();
  EXPECT_EQ(report.nodes_per_backend.at("example"), 5);
  EXPECT_EQ(report.groups, 1) << "five elementwise nodes, one launch";
}

TEST(FusionEndToEnd, AGroupOneBackendDeclinesGoesWholeToTheNext) {
  torch::manual_seed(11);
  torch::NoGradGuard no_grad;
  // gelu is elementwise, so it joins the group, but the example plugin does not know it: the group
  // goes whole to the next backend in priority order, the CPU plugin.
  auto fn = [](at::Tensor x, at::Tensor y) { return torch::gelu(torch::relu(x) * y) + x; };
  auto options = with_example_plugin();
  const auto folder = std::filesystem::temp_directory_path() / ("zenith-declined-" + std::to_string(::getpid()));
  options.dump_dir = folder.string();
  auto fast = compile(fn, options);
  for (int call = 0; call < kCallsPerSignature; ++call) {
    auto x = torch::randn({8, 8}), y = torch::randn({8, 8});
    EXPECT_TRUE(torch::allclose(fast(x, y), fn(x, y), 1e-6, 1e-6)) << call_name(call);
  }
  auto report = fast.report();
  EXPECT_EQ(report.nodes_per_backend.count("example"), 0u);
  EXPECT_EQ(report.nodes_per_backend.at("cpu"), 4);
  EXPECT_EQ(report.groups, 1);
  // The dump says why: the example plugin, asked first, declined the group.
  auto dump = dump_from_json(read_json_file(report.dump_path));
  zenith::testing::remove_folder(folder);
  ASSERT_EQ(dump.steps.size(), 1u);
  EXPECT_EQ(dump.steps[0].backend, "cpu");
  // With a GPU the CUDA plugins are asked (and decline) too.
  const auto& declined = dump.steps[0].declined;
  auto example = std::find_if(declined.begin(), declined.end(),
                              [](const std::string& why) { return why.rfind("example: ", 0) == 0; });
  EXPECT_NE(example, declined.end()) << "the example plugin's refusal is listed";
  for (const auto& why : declined) EXPECT_EQ(why.find("cpu: "), std::string::npos) << why;
}

TEST(FusionEndToEnd, ANodeNoBackendClaimsIsAGraphBreakBetweenKernels) {
  torch::manual_seed(13);
  torch::NoGradGuard no_grad;
  // Only the example plugin may run anything: it takes the elementwise chains before and after the
  // matrix product, which no backend claims and runs eagerly between them, and not the cumulative
  // sum after them. The tolerance: the example plugin's ulps (above) through a product of 16 terms
  // and a sum of 16 of order one, 1e-5.
  auto fn = [](at::Tensor x, at::Tensor y, at::Tensor w) {
    return (torch::sigmoid(torch::relu(x) * y).matmul(w).tanh() + y).cumsum(1);
  };
  auto options = with_example_plugin();
  options.backends = {"example"};
  const auto folder = std::filesystem::temp_directory_path() / ("zenith-break-" + std::to_string(::getpid()));
  options.dump_dir = folder.string();
  auto fast = compile(fn, options);
  for (int call = 0; call < kCallsPerSignature; ++call) {
    auto x = torch::randn({8, 16}), y = torch::randn({8, 16}), w = torch::randn({16, 16});
    EXPECT_TRUE(torch::allclose(fast(x, y, w), fn(x, y, w), 1e-5, 1e-5)) << call_name(call);
  }
  auto report = fast.report();
  EXPECT_FALSE(report.eager_fallback) << report.fallback_reason;
  EXPECT_EQ(fast.stats().eager_calls, 0);
  EXPECT_EQ(report.nodes_per_backend.at("example"), 5) << "relu, mul, sigmoid, then tanh, add";
  ASSERT_EQ(report.graph_breaks.size(), 2u) << report.to_string();
  EXPECT_EQ(report.graph_breaks[0].rfind("aten::matmul: example: ", 0), 0u) << report.graph_breaks[0];
  EXPECT_EQ(report.graph_breaks[1].rfind("aten::cumsum: example: ", 0), 0u) << report.graph_breaks[1];
  EXPECT_NE(report.to_string().find("graph breaks: 2 nodes run eagerly between kernels"), std::string::npos)
      << report.to_string();
  auto dump = dump_from_json(read_json_file(report.dump_path));
  zenith::testing::remove_folder(folder);
  EXPECT_EQ(dump.report.graph_breaks, report.graph_breaks);
  auto eager_steps = std::count_if(dump.steps.begin(), dump.steps.end(), [](const auto& s) { return s.backend == "eager"; });
  EXPECT_EQ(eager_steps, 2);
}

TEST(FusionEndToEnd, ManyKernelsCompileTogetherAndRunInOrder) {
  torch::NoGradGuard no_grad;
  // Twelve fused chains, each cut off from the next by a flip: 24 kernels compiled at once by the
  // lowering's workers, then run in dependency order.
  auto fn = [](at::Tensor x, at::Tensor y) {
    for (int i = 0; i < 12; ++i) x = torch::flip(torch::tanh(x * y + y) - x, {-1});
    return x;
  };
  auto fast = compile(fn, with_example_plugin());
  // The tolerance from the chain's conditioning: a link maps an error dx to (tanh'(.) * y - 1) dx,
  // at most (1 + |y|) dx. With |y| <= 0.5 twelve links amplify a rounding by at most 1.5^12 = 130;
  // twelve links of a few float32 roundings (2.4e-7 relative each, |x| of order one) stay below
  // 130 * 12 * 2.4e-7 = 4e-4. A kernel run out of order is off by order one. (With y ~ N(0, 1),
  // as before, the bound was 5^12 and the test failed 17 runs in 150.)
  torch::manual_seed(12);
  for (int call = 0; call < kCallsPerSignature; ++call) {  // the capture, then replays on fresh values
    auto x = torch::randn({4, 16}), y = torch::rand({4, 16}) - 0.5;
    EXPECT_TRUE(torch::allclose(fast(x, y), fn(x, y), 5e-4, 5e-4)) << call_name(call);
  }
  auto report = fast.report();
  EXPECT_EQ(report.groups, 24);
  EXPECT_EQ(report.kernels_compiled + report.kernel_cache_hits, 12) << "the example plugin's fused chains";
  EXPECT_EQ(report.groups_without_compile, 12) << "the CPU plugin's flips: dispatcher calls";
  EXPECT_EQ(report.nodes_per_backend.at("example"), 48);
  EXPECT_EQ(report.nodes_per_backend.at("cpu"), 12);
}

#ifdef ZENITH_WRONG_PLUGIN
TEST(FusionEndToEnd, AGroupNoBackendClaimsIsSplitBack) {
  torch::manual_seed(13);
  torch::NoGradGuard no_grad;
  // The only backend takes single relu and neg nodes but no groups: the fused relu -> neg group is
  // declined by everyone and split back into two single-node steps. (That plugin computes wrong
  // values on purpose; this test is about placement.)
  CompileOptions options;
  options.plugin_paths = {ZENITH_WRONG_PLUGIN};
  options.backends = {"wrong"};
  options.fallback_to_eager = false;
  auto fast = compile([](at::Tensor x) { return torch::neg(torch::relu(x)); }, options);
  fast(torch::randn({6}));
  auto report = fast.report();
  ASSERT_EQ(report.passes.back().counters.at("groups"), 1);
  EXPECT_EQ(report.nodes_per_backend.at("wrong"), 2);
  EXPECT_EQ(report.groups, 2);
}
#endif

TEST(FusionEndToEnd, AMaskedSoftmaxCompilesAndMatchesEager) {
  torch::manual_seed(14);
  torch::NoGradGuard no_grad;
  // masked_fill(mask, -inf) then softmax, the usual attention mask: -inf crosses the group JSON.
  auto fn = [](at::Tensor scores, at::Tensor mask) {
    return torch::softmax(scores.masked_fill(mask, -std::numeric_limits<double>::infinity()), -1);
  };
  CompileOptions options;
  options.fallback_to_eager = false;
  auto fast = compile(fn, options);
  // The CPU plugin runs ATen's masked_fill and softmax themselves: the same kernels on the same
  // values. Fresh scores and a fresh mask (every row keeps its diagonal, so none is all -inf).
  for (int call = 0; call < kCallsPerSignature; ++call) {
    auto scores = torch::randn({3, 8, 8});
    auto mask = (torch::rand({8, 8}) < 0.5).logical_and(torch::eye(8, torch::kBool).logical_not());
    EXPECT_TRUE(torch::allclose(fast(scores, mask), fn(scores, mask), 1e-6, 1e-6)) << call_name(call);
  }
  EXPECT_EQ(fast.report().groups, 1) << fast.report().to_string();
}

TEST(FusionEndToEnd, StepsRunInDependencyOrderAroundAGroup) {
  torch::manual_seed(15);
  torch::NoGradGuard no_grad;
  // relu(x) and the final add fuse; flip(y) sits between them in the trace and feeds the add, so
  // it must run before the fused group even though the group's first node comes earlier.
  auto fn = [](at::Tensor x, at::Tensor y) {
    auto r = torch::relu(x);
    auto s = torch::flip(y, {-1});
    return (r + s) * r;
  };
  auto fast = compile(fn, with_example_plugin());
  for (int call = 0; call < kCallsPerSignature; ++call) {
    auto x = torch::randn({5, 6}), y = torch::randn({5, 6});
    EXPECT_TRUE(torch::allclose(fast(x, y), fn(x, y), 1e-6, 1e-6)) << call_name(call);
  }
  EXPECT_EQ(fast.report().nodes_per_backend.at("example"), 3);
  EXPECT_EQ(fast.report().groups, 2);  // flip, then the fused relu/add/mul
}

}  // namespace
}  // namespace zenith::passes
