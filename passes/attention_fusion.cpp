#include "passes/attention_fusion.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <set>

#include "core/attention_blind_rows.h"
#include "core/node_arguments.h"
#include "core/tensor_type.h"
#include "passes/meta_values.h"
#include "passes/node_splicing.h"

namespace zenith::passes {
namespace {

bool is_op(const ir::Node* node, const char* op, const char* overload) {
  return node != nullptr && node->op == op && node->overload == overload && node->outputs.size() == 1;
}

// One attention pattern: the nodes it replaces (by index) and what the fused node reads.
struct Match {
  std::vector<std::size_t> removed;  // the score product, scale, mask add and softmax
  std::size_t context = 0;           // the product with v, which the fused node replaces
  int q = -1, k = -1, v = -1;
  std::optional<int> mask;
  // A constant bool mask (true: attend) taken from a masked_fill or where of the scores, and the
  // constant it came from (whose type gives its device).
  std::optional<at::Tensor> attend;
  int attend_source = -1;
  double scale = 1.0;
  // Autocast's form: the softmax computes in float32 and its result is cast down to v's dtype.
  bool float32_softmax = false;
  // The additive mask may have blind rows: attention_blind_rows follows the fused node.
  bool blind_rows = false;
};

class Matcher {
 public:
  Matcher(const ir::Graph& graph, bool cuda_only, bool blind_rows)
      : graph_(graph), cuda_only_(cuda_only), blind_rows_(blind_rows), producers_(graph.producers()),
        consumers_(graph.consumers()), returned_(graph.outputs.begin(), graph.outputs.end()) {}

  // Patterns that match() left written out for their additive mask (rows_stay_in_range).
  std::int64_t additive_masks_kept() const { return additive_masks_kept_; }

  // The pattern ending at node `index` (the product of the probabilities with v), if it is one.
  std::optional<Match> match(std::size_t index) const {
    const auto& context = graph_.nodes[index];
    if (!is_op(&context, "aten::matmul", "")) return std::nullopt;
    int probabilities = ir::tensor_arg(context, "self");
    const int v = ir::tensor_arg(context, "other");
    if (probabilities < 0 || v < 0 || !only_feeds_once(probabilities)) return std::nullopt;
    Match found;
    // Under autocast the product casts float32 probabilities down to v's dtype.
    const auto* cast = producer(probabilities);
    if (cast != nullptr && ir::is_plain_cast(*cast) && graph_.value(probabilities).type.dtype == graph_.value(v).type.dtype) {
      const int wide = ir::tensor_arg(*cast, "self");
      if (graph_.value(wide).type.dtype != at::kFloat || !only_feeds_once(wide)) return std::nullopt;
      found.float32_softmax = true;
      found.removed.push_back(node_index(cast));
      probabilities = wide;
    }
    const auto* softmax = producer(probabilities);
    if (!is_op(softmax, "aten::softmax", "int") || !softmax_dtype_fits(*softmax, found.float32_softmax)) {
      return std::nullopt;
    }
    const int scores = ir::tensor_arg(*softmax, "self");
    const auto* dim = softmax->arg("dim") ? std::get_if<std::int64_t>(&softmax->arg("dim")->value) : nullptr;
    if (scores < 0 || dim == nullptr || !only_feeds_once(scores)) return std::nullopt;
    if (*dim != -1 && *dim != graph_.value(scores).type.rank() - 1) return std::nullopt;
    found.context = index;
    found.v = v;
    found.removed.push_back(node_index(softmax));
    const auto* masked = producer(scores);
    std::optional<Match> chain;
    if (is_op(masked, "aten::add", "Tensor") && ir::number_arg(*masked, "alpha") == 1.0) {
      for (auto [side, mask] : {std::pair{"self", "other"}, std::pair{"other", "self"}}) {
        const int scaled = ir::tensor_arg(*masked, side);
        const int additive = ir::tensor_arg(*masked, mask);
        if (scaled < 0 || additive < 0 || !only_feeds_once(scaled)) continue;
        chain = scaled_scores(scaled);
        if (chain) {
          chain->mask = additive;
          chain->removed.push_back(node_index(masked));
          break;
        }
      }
    } else if (auto filled = constant_fill(masked, graph_.value(scores).type.dtype)) {
      if (only_feeds_once(filled->scores)) chain = scaled_scores(filled->scores);
      if (chain) {
        chain->attend = filled->attend;
        chain->attend_source = filled->source;
        chain->removed.push_back(node_index(masked));
      }
    } else {
      chain = scaled_scores(scores);
    }
    if (!chain) return std::nullopt;
    found.q = chain->q;
    found.k = chain->k;
    found.mask = chain->mask;
    found.attend = chain->attend;
    found.attend_source = chain->attend_source;
    found.scale = chain->scale;
    found.removed.insert(found.removed.end(), chain->removed.begin(), chain->removed.end());
    if (!operands_fit(found, graph_.value(scores).type)) return std::nullopt;
    return found;
  }

 private:
  // No dtype of its own; or, in autocast's form, float32 (which autocast passes to a softmax).
  static bool softmax_dtype_fits(const ir::Node& softmax, bool float32_softmax) {
    const auto* dtype = softmax.arg("dtype");
    if (dtype == nullptr) return false;
    if (std::holds_alternative<ir::NoneArg>(dtype->value)) return true;
    const auto* code = std::get_if<std::int64_t>(&dtype->value);
    return float32_softmax && code != nullptr && static_cast<c10::ScalarType>(*code) == at::kFloat;
  }

  // Scores with a constant mask's positions filled: masked_fill(scores, masked, fill) or
  // where(attend, scores, fill), the mask a constant bool tensor (a causal or sliding-window mask
  // built from sizes and folded), the fill -inf or at most half the dtype's lowest (models use
  // torch.finfo(dtype).min). Only when every query attends to at least one key: then a filled
  // score's exp underflows to 0 beside the row's largest, exactly as the fused kernels' -inf does,
  // and the result is eager's. A fully masked row would be NaN (-inf) or uniform (finite fill) in
  // eager and 0 fused, so a mask with one, or one that is data, stays written out.
  struct Filled {
    int scores = -1;
    at::Tensor attend;
    int source = -1;
  };
  std::optional<Filled> constant_fill(const ir::Node* node, c10::ScalarType dtype) const {
    if (node == nullptr || node->outputs.size() != 1) return std::nullopt;
    std::optional<double> fill;
    int mask = -1, scores = -1;
    bool attend_where_true = false;
    if (is_op(node, "aten::masked_fill", "Scalar")) {
      scores = ir::tensor_arg(*node, "self");
      mask = ir::tensor_arg(*node, "mask");
      fill = ir::number_arg(*node, "value");
    } else if (is_op(node, "aten::where", "self") || is_op(node, "aten::where", "ScalarOther")) {
      scores = ir::tensor_arg(*node, "self");
      mask = ir::tensor_arg(*node, "condition");
      attend_where_true = true;
      fill = node->overload == "self" ? constant_number(ir::tensor_arg(*node, "other")) : ir::number_arg(*node, "other");
    }
    const auto data = constant_data(mask);
    if (scores < 0 || !fill || !data || data->scalar_type() != at::kBool || data->dim() == 0) return std::nullopt;
    const double lowest = dtype == at::kHalf       ? static_cast<double>(std::numeric_limits<c10::Half>::lowest())
                          : dtype == at::kBFloat16 ? static_cast<double>(std::numeric_limits<c10::BFloat16>::lowest())
                                                   : static_cast<double>(std::numeric_limits<float>::lowest());
    if (!(*fill <= lowest / 2)) return std::nullopt;  // NaN fails too
    auto attend = attend_where_true ? *data : data->logical_not();
    if (!attend.any(-1).all().item<bool>()) return std::nullopt;
    return Filled{scores, attend, mask};
  }

  // The data of a constant value, if the graph holds it.
  std::optional<at::Tensor> constant_data(int id) const {
    if (id < 0 || graph_.value(id).role != ir::ValueRole::Constant) return std::nullopt;
    auto it = graph_.constants.find(id);
    if (it == graph_.constants.end() || !it->second.defined()) return std::nullopt;
    return it->second;
  }

  // A constant of one element (a traced torch.full([], value) or scalar_tensor), as a number.
  std::optional<double> constant_number(int id) const {
    const auto data = constant_data(id);
    if (!data || data->numel() != 1 || !at::isFloatingType(data->scalar_type())) return std::nullopt;
    return data->item<double>();
  }

  // matmul(q, k.transpose(-2, -1)), times or divided by a number, or not.
  std::optional<Match> scaled_scores(int id) const {
    Match found;
    const auto* node = producer(id);
    if (is_op(node, "aten::mul", "Scalar") || is_op(node, "aten::div", "Scalar")) {
      const auto number = ir::number_arg(*node, "other");
      const int scores = ir::tensor_arg(*node, "self");
      if (!number || *number == 0.0 || scores < 0 || !only_feeds_once(scores)) return std::nullopt;
      found.scale = node->op == "aten::mul" ? *number : 1.0 / *number;
      found.removed.push_back(node_index(node));
      node = producer(scores);
    }
    if (!is_op(node, "aten::matmul", "")) return std::nullopt;
    const int q = ir::tensor_arg(*node, "self");
    const int transposed = ir::tensor_arg(*node, "other");
    if (q < 0 || transposed < 0) return std::nullopt;
    const auto* transpose = producer(transposed);
    if (!is_op(transpose, "aten::transpose", "int") || ir::tensor_arg(*transpose, "self") < 0) return std::nullopt;
    const auto rank = graph_.value(transposed).type.rank();
    auto normalized = [&](const char* name) {
      const auto* arg = transpose->arg(name);
      const auto* d = arg ? std::get_if<std::int64_t>(&arg->value) : nullptr;
      return d == nullptr ? std::int64_t{-1} : (*d < 0 ? *d + rank : *d);
    };
    const std::set<std::int64_t> dims = {normalized("dim0"), normalized("dim1")};
    if (dims != std::set<std::int64_t>{rank - 2, rank - 1}) return std::nullopt;
    found.q = q;
    found.k = ir::tensor_arg(*transpose, "self");
    found.removed.push_back(node_index(node));
    return found;
  }

  // q [B, H, T, D], k [B, H, S, D], v [B, H, S, Dv] of one floating dtype on one device; the mask
  // of that dtype, broadcasting to the scores [B, H, T, S]. In autocast's form q, k and v are
  // float16 or bfloat16 and the mask and the masked scores may be float32.
  bool operands_fit(Match& m, const ir::TensorType& scores) const {
    const auto& q = graph_.value(m.q).type;
    const auto& k = graph_.value(m.k).type;
    const auto& v = graph_.value(m.v).type;
    const bool floating = q.dtype == at::kFloat || q.dtype == at::kHalf || q.dtype == at::kBFloat16;
    const bool half = q.dtype == at::kHalf || q.dtype == at::kBFloat16;
    if (m.float32_softmax && !half) return false;
    const auto wide_or_own = [&](c10::ScalarType dtype) {
      return dtype == q.dtype || (m.float32_softmax && dtype == at::kFloat);
    };
    if (!floating || k.dtype != q.dtype || v.dtype != q.dtype || !wide_or_own(scores.dtype)) return false;
    if (q.rank() != 4 || k.rank() != 4 || v.rank() != 4) return false;
    if (k.device != q.device || v.device != q.device || (cuda_only_ && !q.device.is_cuda())) return false;
    if (q.sizes[0] != k.sizes[0] || q.sizes[1] != k.sizes[1] || v.sizes[0] != q.sizes[0] || v.sizes[1] != q.sizes[1]) {
      return false;
    }
    if (k.sizes[2] != v.sizes[2] || k.sizes[3] != q.sizes[3]) return false;
    if (m.attend) return m.attend->dim() <= 4 && broadcasts_to(m.attend->sizes().vec(), scores);
    if (!m.mask) return true;
    const auto& mask = graph_.value(*m.mask).type;
    if (!wide_or_own(mask.dtype) || mask.device != q.device || mask.rank() > 4) return false;
    // float16 cannot hold a float32 mask's large negatives: -65504 added to the scores does not
    // swamp them as float32's lowest does in eager's float32 sum, so a fully masked row would
    // come out as the softmax of its scores instead of uniform. bfloat16 has float32's range.
    if (mask.dtype != q.dtype && q.dtype == at::kHalf) return false;
    if (!broadcasts_to(mask.sizes, scores)) return false;
    if (rows_stay_in_range(*m.mask)) return true;
    // The fused node's blind rows are computed again as written (core/attention_blind_rows.h):
    // a softmax over scores plus a mask summed in q's dtype, its probabilities in that dtype, as
    // eager computes them. The form that asks the softmax for float32 and casts its result back
    // (most of transformers' decoders in float16 or bfloat16) computes the same when the sums are
    // in q's dtype: the float32 softmax of the same sums, rounded to q's dtype by the cast. A
    // float32 mask promoting the sums stays written out.
    if (blind_rows_ && mask.dtype == q.dtype && scores.dtype == q.dtype) {
      m.blind_rows = true;
      return true;
    }
    ++additive_masks_kept_;
    return false;
  }

  // A row of an additive mask whose every entry is large and negative (a query whose every key is
  // masked: a padded query in Mistral's sliding window, a left-padded one in a causal model) is
  // eager's and the fused kernels' alike only by accident. Eager's written-out softmax over
  // float32's lowest plus the scores weighs the keys evenly; PyTorch's fused CUDA kernels give
  // such a row 0 (measured on an H100, PyTorch 2.11: float32 and bfloat16); and in float16 eager
  // rounds each sum to a multiple of 32 first. A constant mask shows it has no such row; a mask
  // that is data (built from an attention mask or a position) may, so it stays written out.
  bool rows_stay_in_range(int mask) const {
    const auto data = constant_data(mask);
    if (!data) return false;
    const auto entries = data->to(at::kFloat);
    if (entries.dim() == 0) return entries.item<double>() >= ir::kBlindRowMaskLimit;
    return (entries.amax(-1) >= ir::kBlindRowMaskLimit).all().item<bool>();
  }

  // A mask of `sizes` (rank at most 4) broadcasts to the scores [B, H, T, S].
  static bool broadcasts_to(const std::vector<std::int64_t>& sizes, const ir::TensorType& scores) {
    const auto rank = static_cast<std::int64_t>(sizes.size());
    for (std::int64_t d = 0; d < rank; ++d) {
      const auto size = sizes[static_cast<std::size_t>(d)];
      const auto target = scores.sizes[static_cast<std::size_t>(4 - rank + d)];
      if (size != target && size != 1) return false;
    }
    return true;
  }

  const ir::Node* producer(int id) const {
    const int index = producers_[static_cast<std::size_t>(id)];
    return index < 0 ? nullptr : &graph_.nodes[static_cast<std::size_t>(index)];
  }
  std::size_t node_index(const ir::Node* node) const { return static_cast<std::size_t>(node - graph_.nodes.data()); }
  // Read by one node, once, and not returned: the fused node may make it disappear.
  bool only_feeds_once(int id) const {
    const auto& readers = consumers_[static_cast<std::size_t>(id)];
    if (readers.size() != 1 || returned_.count(id)) return false;
    const auto inputs = graph_.nodes[static_cast<std::size_t>(readers.front())].input_ids();
    return std::count(inputs.begin(), inputs.end(), id) == 1;
  }

  const ir::Graph& graph_;
  const bool cuda_only_;
  const bool blind_rows_;
  mutable std::int64_t additive_masks_kept_ = 0;  // patterns left for rows_stay_in_range
  const std::vector<int> producers_;
  const std::vector<std::vector<int>> consumers_;
  const std::set<int> returned_;
};

// Appends `node` to `nodes` with one new result, typed as ATen gives it on the meta device or, for
// an op without a meta kernel, as the value `like`.
int append_typed(ir::Graph& graph, MetaValues& meta, ir::Node node, std::vector<ir::Node>& nodes,
                 std::optional<int> like = std::nullopt) {
  if (!like) {
    const int id = type_result(graph, meta, node);
    nodes.push_back(std::move(node));
    return id;
  }
  const auto& laid_out = graph.value(*like).type;
  auto result = at::empty_strided(laid_out.sizes, laid_out.strides,
                                  at::TensorOptions().dtype(laid_out.dtype).device(at::kMeta));
  auto type = type_of(result);
  type.device = graph.value(node.input_ids().at(0)).type.device;
  node.outputs = {graph.add_value(type, ir::ValueRole::Intermediate)};
  meta.set(node.outputs[0], result);
  nodes.push_back(std::move(node));
  return nodes.back().outputs[0];
}

// A float32 mask beside bfloat16 q, k and v (autocast's form) in bfloat16, which the fused kernels
// take. Finite values below bfloat16's lowest saturate to it: float32's lowest, the usual masking
// value, would round to -inf and turn a fully masked row, which eager's float32 softmax makes
// uniform, into NaN. -inf stays -inf, NaN stays NaN.
int mask_in_bfloat16(ir::Graph& graph, int mask, std::vector<ir::Node>& nodes) {
  MetaValues meta(graph);
  const double lowest = static_cast<double>(std::numeric_limits<c10::BFloat16>::lowest());
  const int saturated =
      append_typed(graph, meta, make_node("aten::clamp_min", "", {{"self", ir::ValueRef{mask}}, {"min", lowest}}), nodes);
  const int is_minus_infinity = append_typed(
      graph, meta,
      make_node("aten::eq", "Scalar", {{"self", ir::ValueRef{mask}}, {"other", -std::numeric_limits<double>::infinity()}}),
      nodes);
  // where has no meta kernel; over operands of one layout its result is laid out as the clamp's.
  const int kept = append_typed(graph, meta,
                                make_node("aten::where", "self",
                                          {{"condition", ir::ValueRef{is_minus_infinity}},
                                           {"self", ir::ValueRef{mask}},
                                           {"other", ir::ValueRef{saturated}}}),
                                nodes, saturated);
  return append_typed(graph, meta, ir::plain_cast(kept, at::kBFloat16), nodes);
}

// `graph` with `m` rewritten, or nullopt when that would change the type of a returned value (or
// the meta device cannot type the mask's cast).
std::optional<ir::Graph> rewrite(const ir::Graph& graph, const Match& m) {
  ir::Graph result = graph;
  std::vector<ir::Node> mask_nodes;
  std::optional<int> mask = m.mask;
  // operands_fit lets only a float32 mask beside bfloat16 differ from q's dtype.
  if (mask && result.value(*mask).type.dtype != graph.value(m.q).type.dtype) {
    try {
      mask = mask_in_bfloat16(result, *mask, mask_nodes);
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }
  // A constant mask that hides nothing is none; one that is PyTorch's causal mask (query i sees
  // keys 0 to i) is is_causal, which the flash kernel takes and a bool mask it does not.
  bool causal = false;
  if (m.attend && !m.attend->all().item<bool>()) {
    const auto rows = graph.value(m.q).type.sizes[2], keys = graph.value(m.k).type.sizes[2];
    const auto top_left = at::ones({rows, keys}, m.attend->options()).tril();
    causal = m.attend->eq(top_left).all().item<bool>();
    if (!causal) {
      auto type = type_of(*m.attend);
      type.device = graph.value(m.attend_source).type.device;
      mask = result.add_value(type, ir::ValueRole::Constant);
      result.constants[*mask] = *m.attend;
    }
  }
  const int out = result.nodes[m.context].outputs.front();
  ir::Node fused;
  fused.op = "aten::scaled_dot_product_attention";
  fused.args = {{"query", ir::ValueRef{m.q}},
                {"key", ir::ValueRef{m.k}},
                {"value", ir::ValueRef{m.v}},
                {"attn_mask", mask ? ir::ArgValue{ir::ValueRef{*mask}} : ir::ArgValue{ir::NoneArg{}}},
                {"dropout_p", 0.0},
                {"is_causal", causal},
                {"scale", m.scale},
                {"enable_gqa", false}};
  auto laid_out = result.value(out).type;
  laid_out.strides = fused_attention_layout(laid_out.sizes);
  std::vector<ir::Node> made = std::move(mask_nodes);
  if (m.blind_rows) {
    // The fused node's result, then its blind rows as written: the pattern's result.
    const int attention = result.add_value(laid_out, ir::ValueRole::Intermediate);
    fused.outputs = {attention};
    auto blind = make_node(ir::kAttentionBlindRowsOp, "",
                           {{"attention", ir::ValueRef{attention}},
                            {"query", ir::ValueRef{m.q}},
                            {"key", ir::ValueRef{m.k}},
                            {"value", ir::ValueRef{m.v}},
                            {"attn_mask", ir::ValueRef{*mask}},
                            {"scale", m.scale}});
    try {
      MetaValues meta(result);
      type_result(result, meta, blind, out);
    } catch (const std::exception&) {
      return std::nullopt;
    }
    made.push_back(std::move(fused));
    made.push_back(std::move(blind));
  } else {
    fused.outputs = {out};
    result.value(out).type = laid_out;
    made.push_back(std::move(fused));
  }
  std::set<std::size_t> dropped(m.removed.begin(), m.removed.end());
  dropped.insert(m.context);
  const auto after = splice_nodes(result, m.context, std::move(made), dropped);
  // What reads the result is typed again, on meta tensors, as ATen will lay it out.
  if (!retype_readers(result, {out}, after)) return std::nullopt;
  result.remove_unused_values();
  return result;
}

}  // namespace

std::vector<std::int64_t> fused_attention_layout(const std::vector<std::int64_t>& sizes) {
  const auto heads = sizes[1], tokens = sizes[2], dim = sizes[3];
  return {tokens * heads * dim, dim, heads * dim, 1};
}

void AttentionFusion::run(ir::Graph& graph, PassReport& report) {
  std::int64_t fused = 0, checked = 0, kept = 0, masks_kept = 0;
  std::set<int> refused;  // context values whose rewrite would change a returned type
  for (bool again = true; again;) {
    again = false;
    Matcher matcher(graph, cuda_only_, blind_rows_);
    for (std::size_t n = 0; n < graph.nodes.size(); ++n) {
      const int out = graph.nodes[n].outputs.empty() ? -1 : graph.nodes[n].outputs.front();
      if (refused.count(out)) continue;
      auto found = matcher.match(n);
      if (!found) continue;
      if (auto rewritten = rewrite(graph, *found)) {
        graph = std::move(*rewritten);
        ++fused;
        if (found->blind_rows) ++checked;
        again = true;
        break;
      }
      refused.insert(out);
      ++kept;
    }
    // The last scan, which rewrites nothing, sees every pattern left: its count is the pass's.
    masks_kept = matcher.additive_masks_kept();
  }
  report.counters["fused"] = fused;
  if (checked) report.counters["blind_rows_checked"] = checked;
  if (kept) report.counters["type_would_change"] = kept;
  if (masks_kept) report.counters["additive_mask_kept"] = masks_kept;
}

}  // namespace zenith::passes
