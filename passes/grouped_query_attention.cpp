#include "passes/grouped_query_attention.h"

#include <optional>
#include <set>

#include <ATen/ATen.h>

#include "core/attention_blind_rows.h"
#include "core/node_arguments.h"
#include "core/tensor_type.h"
#include "passes/attention_fusion.h"
#include "passes/meta_values.h"
#include "passes/node_splicing.h"

namespace zenith::passes {
namespace {

// A key-value tensor [B, kv, S, D] repeated `factor` times along its heads.
struct Repeat {
  int source = -1;
  std::int64_t factor = 0;
};

class RepeatFinder {
 public:
  explicit RepeatFinder(const ir::Graph& graph) : graph_(graph), producers_(graph.producers()) {}

  // reshape(expand(unsqueeze(K, 2), [B, kv, rep, S, D]), [B, kv * rep, S, D]), full slices
  // allowed around the unsqueeze (a traced `K[:, :, None, :, :]`).
  std::optional<Repeat> repeat_of(int id) const {
    const auto* reshape = producer(id);
    if (reshape == nullptr || reshape->op != "aten::reshape") return std::nullopt;
    const auto* expand = producer(through_full_slices(ir::tensor_arg(*reshape, "self")));
    if (expand == nullptr || expand->op != "aten::expand") return std::nullopt;
    const auto* unsqueeze = producer(through_full_slices(ir::tensor_arg(*expand, "self")));
    if (unsqueeze == nullptr || unsqueeze->op != "aten::unsqueeze" || ir::number_arg(*unsqueeze, "dim") != 2.0) {
      return std::nullopt;
    }
    Repeat found;
    found.source = through_full_slices(ir::tensor_arg(*unsqueeze, "self"));
    if (found.source < 0) return std::nullopt;
    const auto& source = graph_.value(found.source).type.sizes;
    const auto& expanded = graph_.value(expand->outputs.front()).type.sizes;
    const auto& repeated = graph_.value(id).type.sizes;
    if (source.size() != 4 || expanded.size() != 5 || repeated.size() != 4) return std::nullopt;
    found.factor = expanded[2];
    const std::vector<std::int64_t> want_expanded = {source[0], source[1], found.factor, source[2], source[3]};
    const std::vector<std::int64_t> want_repeated = {source[0], source[1] * found.factor, source[2], source[3]};
    if (expanded != want_expanded || repeated != want_repeated) return std::nullopt;
    return found;
  }

 private:
  const ir::Node* producer(int id) const {
    if (id < 0) return nullptr;
    const int index = producers_[static_cast<std::size_t>(id)];
    const auto* node = index < 0 ? nullptr : &graph_.nodes[static_cast<std::size_t>(index)];
    return node != nullptr && node->outputs.size() == 1 ? node : nullptr;
  }

  // The value a chain of slices over the whole of their dimension (step 1) views, or `id`.
  int through_full_slices(int id) const {
    for (const auto* slice = producer(id); slice != nullptr && slice->op == "aten::slice"; slice = producer(id)) {
      const int self = ir::tensor_arg(*slice, "self");
      const auto dim = ir::number_arg(*slice, "dim");
      if (self < 0 || !dim || ir::number_arg(*slice, "step") != 1.0) break;
      const auto& sizes = graph_.value(self).type.sizes;
      const auto rank = static_cast<std::int64_t>(sizes.size());
      const auto d = static_cast<std::int64_t>(*dim) < 0 ? static_cast<std::int64_t>(*dim) + rank
                                                          : static_cast<std::int64_t>(*dim);
      if (d < 0 || d >= rank) break;
      const auto start = ir::number_arg(*slice, "start");
      const auto end = ir::number_arg(*slice, "end");
      if (start && *start != 0.0) break;
      if (end && *end < static_cast<double>(sizes[static_cast<std::size_t>(d)])) break;
      id = self;
    }
    return id;
  }

  const ir::Graph& graph_;
  const std::vector<int> producers_;
};

// The attention node's mask is the same for every head and every query position.
bool mask_fits(const ir::Graph& graph, const ir::Node& attention) {
  const auto* arg = attention.arg("attn_mask");
  if (arg == nullptr) return false;
  if (std::holds_alternative<ir::NoneArg>(arg->value)) return true;
  const int mask = ir::tensor_arg(attention, "attn_mask");
  if (mask < 0) return false;
  const auto& sizes = graph.value(mask).type.sizes;
  const auto rank = static_cast<std::int64_t>(sizes.size());
  if (rank > 4) return false;
  for (std::int64_t d = 0; d < rank; ++d) {
    const auto against = 4 - rank + d;  // the dimension of the scores [B, H, T, S] it lines up with
    if ((against == 1 || against == 2) && sizes[static_cast<std::size_t>(d)] != 1) return false;
  }
  return true;
}

// `node` (the attention, or the blind-rows node after it) reading the grouped queries and the
// key-value heads as they are in place of its query, key and value.
ir::Node reading_grouped(ir::Node node, int grouped_query, int keys, int values) {
  for (auto& arg : node.args) {
    if (arg.name == "query") arg.value = ir::ValueRef{grouped_query};
    if (arg.name == "key") arg.value = ir::ValueRef{keys};
    if (arg.name == "value") arg.value = ir::ValueRef{values};
  }
  return node;
}

// `graph` with attention node `index` reading the key-value heads `keys` and `values` as they are
// (and the attention_blind_rows node `blind` after it, if any, reading them so too), or nullopt
// when a value after it could not be typed again.
std::optional<ir::Graph> rewrite(const ir::Graph& graph, std::size_t index, int keys, int values,
                                 std::int64_t factor, std::optional<std::size_t> blind) {
  ir::Graph result = graph;
  const auto attention = graph.nodes[index];
  // The value the heads' order is restored into: the blind rows' result where they follow.
  const int out = blind ? graph.nodes[*blind].outputs.front() : attention.outputs.front();
  const int query = ir::tensor_arg(attention, "query");
  const auto q = graph.value(query).type.sizes;
  const auto dv = graph.value(values).type.sizes[3];
  const auto batch = q[0], groups = q[1] / factor, tokens = q[2];
  MetaValues meta(result);
  std::vector<ir::Node> made;
  std::set<int> changed;
  try {
    auto grouped = make_node("aten::reshape", "", {{"self", ir::ValueRef{query}},
                                                   {"shape", std::vector<std::int64_t>{batch, groups, factor * tokens, q[3]}}});
    const int grouped_query = type_result(result, meta, grouped, -1);
    made.push_back(std::move(grouped));
    auto fused = reading_grouped(attention, grouped_query, keys, values);
    // Typed as the fused kernels lay their result out (see AttentionFusion), not by a meta kernel;
    // for one token, row-major, which the heads' merge below views in place: the JIT backend's
    // attention kernel writes any layout, and PyTorch's result is copied into this one.
    ir::TensorType type = graph.value(out).type;
    type.sizes = {batch, groups, factor * tokens, dv};
    type.strides = tokens == 1 ? std::vector<std::int64_t>{groups * factor * dv, factor * dv, dv, 1}
                               : fused_attention_layout(type.sizes);
    const int grouped_out = result.add_value(type, ir::ValueRole::Intermediate);
    fused.outputs = {grouped_out};
    meta.set(grouped_out, at::empty_strided(type.sizes, type.strides, at::TensorOptions().dtype(type.dtype).device(at::kMeta)));
    made.push_back(std::move(fused));
    int grouped_result = grouped_out;
    if (blind) {
      auto checked = reading_grouped(graph.nodes[*blind], grouped_query, keys, values);
      for (auto& arg : checked.args) {
        if (arg.name == "attention") arg.value = ir::ValueRef{grouped_out};
      }
      grouped_result = type_result(result, meta, checked, -1);
      made.push_back(std::move(checked));
    }
    auto split = make_node("aten::reshape", "", {{"self", ir::ValueRef{grouped_result}},
                                                 {"shape", std::vector<std::int64_t>{batch, groups, factor, tokens, dv}}});
    const int split_out = type_result(result, meta, split, -1);
    made.push_back(std::move(split));
    auto permute = make_node("aten::permute", "", {{"self", ir::ValueRef{split_out}},
                                                   {"dims", std::vector<std::int64_t>{0, 3, 1, 2, 4}}});
    const int permuted = type_result(result, meta, permute, -1);
    made.push_back(std::move(permute));
    auto merge = make_node("aten::reshape", "", {{"self", ir::ValueRef{permuted}},
                                                 {"shape", std::vector<std::int64_t>{batch, tokens, groups * factor, dv}}});
    const int merged = type_result(result, meta, merge, -1);
    made.push_back(std::move(merge));
    auto back = make_node("aten::transpose", "int", {{"self", ir::ValueRef{merged}},
                                                     {"dim0", std::int64_t{1}},
                                                     {"dim1", std::int64_t{2}}});
    const auto before = result.value(out).type.strides;
    type_result(result, meta, back, out);
    if (result.value(out).type.strides != before) changed.insert(out);
    made.push_back(std::move(back));
  } catch (const std::exception&) {
    return std::nullopt;
  }
  std::set<std::size_t> dropped{index};
  if (blind) dropped.insert(*blind);
  const auto after_made = splice_nodes(result, index, std::move(made), dropped);
  if (!retype_readers(result, changed, after_made)) return std::nullopt;
  if (blind) result.remove_unused_values();  // the fused node's own result, read by nothing now
  return result;
}

}  // namespace

void GroupedQueryAttention::run(ir::Graph& graph, PassReport& report) {
  std::int64_t ungrouped = 0, kept = 0;
  std::set<int> refused;  // attention results whose rewrite would change a returned value's layout
  for (bool again = true; again;) {
    again = false;
    RepeatFinder finder(graph);
    const auto consumers = graph.consumers();
    for (std::size_t n = 0; n < graph.nodes.size(); ++n) {
      const auto& node = graph.nodes[n];
      if (node.op != "aten::scaled_dot_product_attention" || node.outputs.size() != 1) continue;
      if (refused.count(node.outputs.front())) continue;
      if (ir::number_arg(node, "dropout_p") != 0.0 || ir::flag_arg(node, "is_causal") ||
          ir::flag_arg(node, "enable_gqa") || !mask_fits(graph, node)) {
        continue;
      }
      const int query = ir::tensor_arg(node, "query");
      const auto keys = finder.repeat_of(ir::tensor_arg(node, "key"));
      const auto values = finder.repeat_of(ir::tensor_arg(node, "value"));
      if (query < 0 || !keys || !values || keys->factor != values->factor || keys->factor < 2) continue;
      const auto& q = graph.value(query).type;
      const auto& k = graph.value(keys->source).type;
      if (q.rank() != 4 || q.sizes[0] != k.sizes[0] || q.sizes[1] != k.sizes[1] * keys->factor) continue;
      if (cuda_only_ && !q.device.is_cuda()) continue;
      const auto blind = ir::blind_rows_after(graph, n, consumers);
      if (auto rewritten = rewrite(graph, n, keys->source, values->source, keys->factor, blind)) {
        graph = std::move(*rewritten);
        ++ungrouped;
        again = true;
        break;
      }
      refused.insert(node.outputs.front());
      ++kept;
    }
  }
  report.counters["ungrouped"] = ungrouped;
  if (kept) report.counters["layout_would_change"] = kept;
}

}  // namespace zenith::passes
