#include "passes/rotary_embedding.h"

#include <algorithm>
#include <optional>
#include <set>

#include <ATen/ATen.h>

#include "core/node_arguments.h"
#include "core/tensor_type.h"
#include "passes/meta_values.h"
#include "passes/node_splicing.h"

namespace zenith::passes {
namespace {

bool is_op(const ir::Node* node, const char* op, const char* overload) {
  return node != nullptr && node->op == op && node->overload == overload && node->outputs.size() == 1;
}

// A rotation found: the rotated tensor, the tables it is multiplied by, and the sum it gives.
struct Rotation {
  std::size_t sum = 0;  // the add node
  int x = -1, cos = -1, sin = -1;
};

class Matcher {
 public:
  explicit Matcher(const ir::Graph& graph) : graph_(graph), producers_(graph.producers()) {}

  std::optional<Rotation> match(std::size_t index) const {
    const auto& sum = graph_.nodes[index];
    if (!is_op(&sum, "aten::add", "Tensor") || ir::number_arg(sum, "alpha") != 1.0) return std::nullopt;
    for (auto [plain_side, rotated_side] : {std::pair{"self", "other"}, std::pair{"other", "self"}}) {
      const auto* plain = producer(ir::tensor_arg(sum, plain_side));
      const auto* rotated = producer(ir::tensor_arg(sum, rotated_side));
      if (!is_op(plain, "aten::mul", "Tensor") || !is_op(rotated, "aten::mul", "Tensor")) continue;
      for (auto [r_side, sin_side] : {std::pair{"self", "other"}, std::pair{"other", "self"}}) {
        const auto x = rotate_half_source(ir::tensor_arg(*rotated, r_side));
        if (!x) continue;
        Rotation found;
        found.sum = index;
        found.x = *x;
        found.sin = ir::tensor_arg(*rotated, sin_side);
        if (ir::tensor_arg(*plain, "self") == *x) found.cos = ir::tensor_arg(*plain, "other");
        else if (ir::tensor_arg(*plain, "other") == *x) found.cos = ir::tensor_arg(*plain, "self");
        if (found.cos >= 0 && found.sin >= 0 && shapes_fit(found, sum.outputs.front())) return found;
      }
    }
    return std::nullopt;
  }

 private:
  const ir::Node* producer(int id) const {
    if (id < 0) return nullptr;
    const int index = producers_[static_cast<std::size_t>(id)];
    return index < 0 ? nullptr : &graph_.nodes[static_cast<std::size_t>(index)];
  }

  static std::int64_t last_dim(const ir::Node& node, std::int64_t rank) {
    const auto dim = ir::number_arg(node, "dim");
    if (!dim) return -1;
    const auto d = static_cast<std::int64_t>(*dim);
    return d < 0 ? d + rank : d;
  }

  // The tensor `id` is a half of along its last dimension, and whether it is the first half.
  std::optional<std::pair<int, bool>> half_of(int id) const {
    const auto* node = producer(id);
    if (node == nullptr || node->outputs.size() != 1) return std::nullopt;
    const int self = ir::tensor_arg(*node, "self");
    if (self < 0) return std::nullopt;
    const auto& sizes = graph_.value(self).type.sizes;
    const auto rank = static_cast<std::int64_t>(sizes.size());
    if (rank == 0 || sizes.back() % 2 != 0 || last_dim(*node, rank) != rank - 1) return std::nullopt;
    const double whole = static_cast<double>(sizes.back()), half = whole / 2;
    std::optional<double> start, end;
    if (node->op == "aten::narrow") {
      start = ir::number_arg(*node, "start");
      const auto length = ir::number_arg(*node, "length");
      if (!start || length != half) return std::nullopt;
      end = *start + half;
    } else if (node->op == "aten::slice" && ir::number_arg(*node, "step") == 1.0) {
      start = ir::number_arg(*node, "start").value_or(0.0);
      end = std::min(ir::number_arg(*node, "end").value_or(whole), whole);
    } else {
      return std::nullopt;
    }
    if (*start == 0.0 && *end == half) return std::pair{self, true};
    if (*start == half && *end == whole) return std::pair{self, false};
    return std::nullopt;
  }

  // x when `id` is cat([neg(second half of x), first half of x], last dimension).
  std::optional<int> rotate_half_source(int id) const {
    const auto* cat = producer(id);
    if (!is_op(cat, "aten::cat", "")) return std::nullopt;
    const auto* tensors = cat->arg("tensors");
    const auto* list = tensors ? std::get_if<ir::ValueListRef>(&tensors->value) : nullptr;
    if (list == nullptr || list->ids.size() != 2 || !list->ids[0] || !list->ids[1]) return std::nullopt;
    const auto rank = static_cast<std::int64_t>(graph_.value(id).type.sizes.size());
    if (last_dim(*cat, rank) != rank - 1) return std::nullopt;
    const auto* negated = producer(*list->ids[0]);
    if (!is_op(negated, "aten::neg", "")) return std::nullopt;
    const auto second = half_of(ir::tensor_arg(*negated, "self"));
    const auto first = half_of(*list->ids[1]);
    if (!second || !first || second->second || !first->second || second->first != first->first) return std::nullopt;
    return first->first;
  }

  // x of a floating dtype; cos and sin span its whole last dimension and broadcast to it; the
  // sum has x's sizes.
  bool shapes_fit(const Rotation& r, int sum) const {
    const auto& x = graph_.value(r.x).type;
    if (x.dtype != at::kFloat && x.dtype != at::kHalf && x.dtype != at::kBFloat16) return false;
    if (graph_.value(sum).type.sizes != x.sizes) return false;
    for (int table : {r.cos, r.sin}) {
      const auto& sizes = graph_.value(table).type.sizes;
      if (sizes.empty() || sizes.size() > x.sizes.size() || sizes.back() != x.sizes.back()) return false;
    }
    return true;
  }

  const ir::Graph& graph_;
  const std::vector<int> producers_;
};

// `sizes` with its last dimension split into [2, half].
std::vector<std::int64_t> split_last(std::vector<std::int64_t> sizes) {
  const auto half = sizes.back() / 2;
  sizes.back() = 2;
  sizes.push_back(half);
  return sizes;
}

// `graph` with rotation `r` elementwise, or nullopt when a value could not be typed or a returned
// value's layout would change.
std::optional<ir::Graph> rewrite(const ir::Graph& graph, const Rotation& r) {
  ir::Graph result = graph;
  MetaValues meta(result);
  std::vector<ir::Node> made;
  std::set<int> changed;
  const int out = graph.nodes[r.sum].outputs.front();
  const auto& x = graph.value(r.x).type;
  auto add = [&](ir::Node node, int output = -1) {
    const int id = type_result(result, meta, node, output);
    made.push_back(std::move(node));
    return id;
  };
  try {
    const int xv = add(make_node("aten::view", "", {{"self", ir::ValueRef{r.x}}, {"size", split_last(x.sizes)}}));
    const auto part = [&](std::int64_t start) {
      return add(make_node("aten::narrow", "", {{"self", ir::ValueRef{xv}},
                                                {"dim", std::int64_t{-2}},
                                                {"start", start},
                                                {"length", std::int64_t{1}}}));
    };
    const int first = part(0), second = part(1);
    const int negated = add(make_node("aten::neg", "", {{"self", ir::ValueRef{second}}}));
    // [[true], [false]]: the first half takes -x2, the second x1.
    const auto selector = (at::arange(2, at::TensorOptions().dtype(at::kLong)) == 0).view({2, 1}).to(x.device);
    const int choose = result.add_value(type_of(selector), ir::ValueRole::Constant);
    result.constants[choose] = selector;
    auto where = make_node("aten::where", "self", {{"condition", ir::ValueRef{choose}},
                                                   {"self", ir::ValueRef{negated}},
                                                   {"other", ir::ValueRef{first}}});
    int rotated = -1;
    try {
      rotated = add(where);
    } catch (const std::exception&) {
      // No meta kernel for where: its result is the broadcast shape, laid out row-major (inside
      // the fused kernel it is never stored).
      auto laid_out = at::empty(split_last(x.sizes), at::TensorOptions().dtype(x.dtype).device(at::kMeta));
      auto type = type_of(laid_out);
      type.device = x.device;
      rotated = result.add_value(type, ir::ValueRole::Intermediate);
      where.outputs = {rotated};
      meta.set(rotated, laid_out);
      made.push_back(std::move(where));
    }
    const auto table = [&](int id) {
      return add(make_node("aten::view", "", {{"self", ir::ValueRef{id}},
                                              {"size", split_last(graph.value(id).type.sizes)}}));
    };
    const int cos = table(r.cos), sin = table(r.sin);
    const int plain = add(make_node("aten::mul", "Tensor", {{"self", ir::ValueRef{xv}}, {"other", ir::ValueRef{cos}}}));
    const int turned = add(make_node("aten::mul", "Tensor", {{"self", ir::ValueRef{rotated}}, {"other", ir::ValueRef{sin}}}));
    const int sum = add(make_node("aten::add", "Tensor", {{"self", ir::ValueRef{plain}},
                                                          {"other", ir::ValueRef{turned}},
                                                          {"alpha", std::int64_t{1}}}));
    const auto before = result.value(out).type.strides;
    add(make_node("aten::reshape", "", {{"self", ir::ValueRef{sum}}, {"shape", graph.value(out).type.sizes}}), out);
    if (result.value(out).type.strides != before) changed.insert(out);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  const auto after_made = splice_nodes(result, r.sum, std::move(made), {r.sum});
  if (!retype_readers(result, changed, after_made)) return std::nullopt;
  return result;
}

}  // namespace

void RotaryEmbedding::run(ir::Graph& graph, PassReport& report) {
  std::int64_t rewritten = 0, kept = 0;
  std::set<int> refused;  // sums whose rewrite was refused
  for (bool again = true; again;) {
    again = false;
    Matcher matcher(graph);
    for (std::size_t n = 0; n < graph.nodes.size(); ++n) {
      const auto& node = graph.nodes[n];
      if (node.outputs.size() != 1 || refused.count(node.outputs.front())) continue;
      const auto found = matcher.match(n);
      if (!found || (cuda_only_ && !graph.value(found->x).type.device.is_cuda())) continue;
      if (auto rewritten_graph = rewrite(graph, *found)) {
        graph = std::move(*rewritten_graph);
        ++rewritten;
        again = true;
        break;
      }
      refused.insert(node.outputs.front());
      ++kept;
    }
  }
  report.counters["rewritten"] = rewritten;
  if (kept) report.counters["kept"] = kept;
}

}  // namespace zenith::passes
