// Grouped-query attention (passes/grouped_query_attention.h): attention over keys and values
// repeated for groups of query heads (repeat_kv: unsqueeze, expand, reshape) reads the key-value
// heads as they are, with each group's query heads as that head's queries, when the mask is the
// same for every head and query position; the result keeps its layout and values. Attention whose
// mask varies by query position, or that is causal, is left alone; for one token the grouped result
// is row-major, so that merging the heads back views it; attention_blind_rows after the attention
// is rewritten with it. Checked against the original graph on fresh draws of every input.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include <ATen/ATen.h>

#include "core/interpreter.h"
#include "core/node_arguments.h"
#include "core/verifier.h"
#include "graph_builders.h"
#include "passes/dead_code_elimination.h"
#include "passes/grouped_query_attention.h"

namespace zenith::passes {
namespace {

using testing::GraphBuilder;
using testing::ints;
using testing::none;
using testing::real;
using testing::scalar;
using testing::value;

constexpr std::int64_t kBatch = 2, kHeads = 6, kKvHeads = 2, kKeys = 7, kDim = 8, kValueDim = 4;

// [B, kv, S, D] -> [B, kv * rep, S, D], as repeat_kv writes it.
int repeat_kv(GraphBuilder& b, int x, std::int64_t dim) {
  const std::int64_t rep = kHeads / kKvHeads;
  int unsqueezed = b.op("aten::unsqueeze", "", {value("self", x), scalar("dim", 2)});
  int expanded = b.op("aten::expand", "", {value("self", unsqueezed),
                                           ints("size", {kBatch, kKvHeads, rep, kKeys, dim}),
                                           {"implicit", false}});
  return b.op("aten::reshape", "", {value("self", expanded), ints("shape", {kBatch, kHeads, kKeys, dim})});
}

struct Attention {
  GraphBuilder builder;
  int merged = -1;
};

// q [B, H, T, D] attending over repeated k and v with a mask of `mask_sizes` (none when empty),
// then the heads merged as models do. With `blind_rows`, attention_blind_rows after the attention,
// as attention fusion leaves a mask that is data.
void build(Attention& a, std::int64_t tokens, std::vector<std::int64_t> mask_sizes, bool causal = false,
           bool blind_rows = false) {
  auto& b = a.builder;
  int q = b.input({kBatch, kHeads, tokens, kDim});
  int k = b.input({kBatch, kKvHeads, kKeys, kDim});
  int v = b.input({kBatch, kKvHeads, kKeys, kValueDim});
  ir::Argument mask = none("attn_mask");
  if (!mask_sizes.empty()) mask = value("attn_mask", b.input(mask_sizes));
  const int keys = repeat_kv(b, k, kDim), values = repeat_kv(b, v, kValueDim);
  int out = b.op("aten::scaled_dot_product_attention", "",
                 {value("query", q), value("key", keys), value("value", values), mask, real("dropout_p", 0.0),
                  {"is_causal", causal}, none("scale"), {"enable_gqa", false}});
  if (blind_rows) {
    out = b.op("zenith::attention_blind_rows", "",
               {value("attention", out), value("query", q), value("key", keys), value("value", values), mask,
                real("scale", 1.0 / std::sqrt(static_cast<double>(kDim)))});
  }
  int back = b.op("aten::transpose", "int", {value("self", out), scalar("dim0", 1), scalar("dim1", 2)});
  a.merged = b.op("aten::reshape", "", {value("self", back), ints("shape", {kBatch, tokens, kHeads * kValueDim})});
}

PassReport rewritten(ir::Graph& graph) {
  PassReport report, removed;
  GroupedQueryAttention(/*cuda_only=*/false).run(graph, report);
  DeadCodeElimination().run(graph, removed);
  return report;
}

// The rewrite's marks common to every case: one attention ungrouped, nothing repeating the keys
// and values, a valid graph, the merged heads' type as before.
void expect_ungrouped(ir::Graph& graph, const ir::Graph& before, int merged) {
  EXPECT_EQ(rewritten(graph).counters["ungrouped"], 1);
  EXPECT_EQ(testing::count_nodes(graph, "aten::expand"), 0) << "nothing repeats the keys and values";
  EXPECT_NO_THROW(ir::verify(graph));
  EXPECT_EQ(graph.value(merged).type, before.value(merged).type);
}

// Fresh draws; masks of 0 and -1e4 as models make them, or with `blind_rows` of float32's lowest
// with key 0 seen, batch element 1 seeing no key at the second draw (blind rows). 1e-5: the same
// sums per query, but a kernel over a longer query block may order them differently.
void expect_same_results(const ir::Graph& before, const ir::Graph& after, const std::vector<at::Tensor>& examples,
                         bool blind_rows = false) {
  at::manual_seed(31);
  for (int draw = 0; draw < 2; ++draw) {
    std::vector<at::Tensor> inputs;
    for (std::size_t i = 0; i < examples.size(); ++i) {
      inputs.push_back(i == 3 ? (at::rand_like(examples[i]) < 0.3).to(at::kFloat) * -1e4 : at::randn_like(examples[i]));
    }
    if (blind_rows) {
      auto hidden = at::rand_like(examples[3]) < 0.3;
      hidden.select(3, 0).fill_(false);
      if (draw == 1) hidden.select(0, 1).fill_(true);
      inputs[3] = at::zeros_like(examples[3]).masked_fill(hidden, static_cast<double>(std::numeric_limits<float>::lowest()));
    }
    auto want = ir::interpret(before, inputs), got = ir::interpret(after, inputs);
    ASSERT_EQ(want.size(), got.size());
    EXPECT_TRUE(at::allclose(got[0], want[0], 1e-5, 1e-5)) << "draw " << draw;
  }
}

TEST(GroupedQueryAttention, DecodeAndPaddingMasksReadTheKeyValueHeadsAsTheyAre) {
  // A decode step (one token, a mask per key); a padding mask over several tokens; no mask.
  const std::pair<std::int64_t, std::vector<std::int64_t>> cases[] = {
      {1, {kBatch, 1, 1, kKeys}}, {3, {kBatch, 1, 1, kKeys}}, {1, {1, kKeys}}, {3, {}}};
  for (const auto& [tokens, mask] : cases) {
    SCOPED_TRACE(::testing::Message() << tokens << " tokens, mask of rank " << mask.size());
    Attention a;
    build(a, tokens, mask);
    const auto before = a.builder.finish({a.merged});
    auto graph = before;
    expect_ungrouped(graph, before, a.merged);
    EXPECT_EQ(testing::count_nodes(graph, "aten::scaled_dot_product_attention"), 1);
    if (tokens == 1) {
      // One token: the grouped result is row-major, so the heads' merge views it (no copy).
      for (const auto& node : graph.nodes) {
        if (node.op != "aten::scaled_dot_product_attention") continue;
        const auto& type = graph.value(node.outputs.front()).type;
        const auto rep = kHeads / kKvHeads;
        EXPECT_EQ(type.strides, (std::vector<std::int64_t>{kKvHeads * rep * kValueDim, rep * kValueDim, kValueDim, 1}))
            << type.to_string();
      }
    }
    expect_same_results(before, graph, a.builder.example_inputs());
  }
}

// attention_blind_rows after the attention is rewritten with it: it reads the grouped queries,
// the key-value heads as they are and the grouped result, and the heads' order is restored after
// it. The result is the original graph's, with a batch element whose every key is masked (blind
// rows, computed as written) and without.
TEST(GroupedQueryAttention, BlindRowsAfterTheAttentionReadTheKeyValueHeadsAsTheyAre) {
  for (std::int64_t tokens : {1, 3}) {
    SCOPED_TRACE(::testing::Message() << tokens << " tokens");
    Attention a;
    build(a, tokens, {kBatch, 1, 1, kKeys}, /*causal=*/false, /*blind_rows=*/true);
    const auto before = a.builder.finish({a.merged});
    auto graph = before;
    expect_ungrouped(graph, before, a.merged);
    ASSERT_EQ(testing::count_nodes(graph, "zenith::attention_blind_rows"), 1);
    for (const auto& node : graph.nodes) {
      if (node.op != "zenith::attention_blind_rows") continue;
      EXPECT_EQ(graph.value(ir::tensor_arg(node, "key")).type.sizes[1], kKvHeads) << "the key-value heads as they are";
      const int attention = ir::tensor_arg(node, "attention");
      EXPECT_EQ(graph.nodes[static_cast<std::size_t>(graph.producers()[static_cast<std::size_t>(attention)])].op,
                "aten::scaled_dot_product_attention");
    }
    expect_same_results(before, graph, a.builder.example_inputs(), /*blind_rows=*/true);
  }
}

TEST(GroupedQueryAttention, LeavesMasksThatDifferByQueryAndCausalAttention) {
  for (bool causal : {false, true}) {
    Attention a;
    if (causal) build(a, 3, {}, /*causal=*/true);
    else build(a, 3, {kBatch, 1, 3, kKeys});  // a causal mask written out: a row per query position
    auto graph = a.builder.finish({a.merged});
    EXPECT_EQ(rewritten(graph).counters["ungrouped"], 0) << "causal " << causal;
    EXPECT_EQ(testing::count_nodes(graph, "aten::expand"), 2);
  }
}

}  // namespace
}  // namespace zenith::passes
