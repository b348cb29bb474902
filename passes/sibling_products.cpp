#include "passes/sibling_products.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "core/node_arguments.h"
#include "core/tensor_type.h"
#include "passes/meta_values.h"
#include "passes/node_splicing.h"

namespace zenith::passes {
namespace {

// One product in linear's form: what it reads and where it is.
struct Product {
  std::size_t node = 0;
  int input = -1;   // x, shared by the siblings
  int weight = -1;  // W [N, K], read as W.t()
  int bias = -1;    // b [N] (addmm, or matmul's one reader adding it), or -1 (matmul alone)
  int bias_add = -1;  // the node adding b to matmul's result, or -1
  int result = -1;    // what the projection's readers read: the product's, or the bias add's
};

// Linear's forms, as the trace records them: a siblings set has one.
enum class Form { Matmul, Addmm, MatmulThenBias };

Form form_of(const Product& product) {
  if (product.bias < 0) return Form::Matmul;
  return product.bias_add < 0 ? Form::Addmm : Form::MatmulThenBias;
}

bool is_parameter(const ir::Graph& graph, int id) {
  return id >= 0 && graph.value(id).role == ir::ValueRole::Parameter;
}

bool is_output(const ir::Graph& graph, int id) {
  return std::find(graph.outputs.begin(), graph.outputs.end(), id) != graph.outputs.end();
}

// Whether `bias` can be concatenated as the bias of a product over `weight`: b [N], contiguous.
bool fits_as_bias(const ir::Graph& graph, int bias, int weight) {
  const auto& b = graph.value(bias).type;
  const auto& w = graph.value(weight).type;
  return b.rank() == 1 && b.sizes[0] == w.sizes[0] && b.dtype == w.dtype && b.strides[0] == 1;
}

// The bias add that is matmul `product`'s one reader (what linear over more than two dimensions
// traces as: matmul, then add of the bias parameter), recorded in `product`; false if there is none.
bool take_bias_add(const ir::Graph& graph, const std::vector<std::vector<int>>& consumers, Product& product) {
  const int out = graph.nodes[product.node].outputs.front();
  const auto& readers = consumers[static_cast<std::size_t>(out)];
  if (readers.size() != 1 || is_output(graph, out)) return false;
  const auto& add = graph.nodes[static_cast<std::size_t>(readers.front())];
  if (add.op != "aten::add" || add.overload != "Tensor" || add.outputs.size() != 1) return false;
  const int self = ir::tensor_arg(add, "self"), other = ir::tensor_arg(add, "other");
  if ((self == out) == (other == out) || ir::number_arg(add, "alpha") != 1.0) return false;
  const int bias = self == out ? other : self;  // b + x W^T adds as x W^T + b does
  if (!is_parameter(graph, bias) || !fits_as_bias(graph, bias, product.weight) ||
      graph.value(add.outputs.front()).type != graph.value(out).type) {
    return false;
  }
  product.bias = bias;
  product.bias_add = readers.front();
  product.result = add.outputs.front();
  return true;
}

// The node at `index` as a product of linear's form over a parameter weight (and bias), if it is.
std::optional<Product> product_at(const ir::Graph& graph, const std::vector<int>& producers,
                                  const std::vector<std::vector<int>>& consumers, std::size_t index, bool cuda_only) {
  const auto& node = graph.nodes[index];
  if (node.overload != "" || node.outputs.size() != 1) return std::nullopt;
  Product product;
  product.node = index;
  product.result = node.outputs.front();
  int transposed = -1;
  if (node.op == "aten::matmul") {
    product.input = ir::tensor_arg(node, "self");
    transposed = ir::tensor_arg(node, "other");
  } else if (node.op == "aten::addmm") {
    if (ir::number_arg(node, "beta") != 1.0 || ir::number_arg(node, "alpha") != 1.0) return std::nullopt;
    product.input = ir::tensor_arg(node, "mat1");
    transposed = ir::tensor_arg(node, "mat2");
    product.bias = ir::tensor_arg(node, "self");
    if (!is_parameter(graph, product.bias)) return std::nullopt;
  } else {
    return std::nullopt;
  }
  if (product.input < 0 || transposed < 0 || producers[static_cast<std::size_t>(transposed)] < 0) return std::nullopt;
  const auto& transpose = graph.nodes[static_cast<std::size_t>(producers[static_cast<std::size_t>(transposed)])];
  if (transpose.op != "aten::t" || transpose.outputs.size() != 1) return std::nullopt;
  product.weight = ir::tensor_arg(transpose, "self");
  if (!is_parameter(graph, product.weight)) return std::nullopt;
  const auto& weight = graph.value(product.weight).type;
  const auto& input = graph.value(product.input).type;
  if (weight.rank() != 2 || weight.strides != std::vector<std::int64_t>{weight.sizes[1], 1}) return std::nullopt;
  if (input.dtype != weight.dtype || input.device != weight.device || (cuda_only && !weight.device.is_cuda())) {
    return std::nullopt;
  }
  if (node.op == "aten::matmul") take_bias_add(graph, consumers, product);
  const bool addmm_bias = product.bias_add < 0 && product.bias >= 0;
  if (addmm_bias && !fits_as_bias(graph, product.bias, product.weight)) return std::nullopt;
  return product;
}

// Products that may become one: same input, form, dtype and columns; in graph order.
std::vector<std::vector<Product>> sibling_sets(const ir::Graph& graph, bool cuda_only) {
  const auto producers = graph.producers();
  const auto consumers = graph.consumers();
  std::map<std::tuple<int, Form, std::int64_t>, std::vector<Product>> by_input;
  for (std::size_t n = 0; n < graph.nodes.size(); ++n) {
    auto product = product_at(graph, producers, consumers, n, cuda_only);
    if (!product) continue;
    const auto columns = graph.value(product->weight).type.sizes[1];
    by_input[{product->input, form_of(*product), columns}].push_back(*product);
  }
  std::vector<std::vector<Product>> sets;
  for (auto& [key, products] : by_input) {
    if (products.size() >= 2) sets.push_back(std::move(products));
  }
  return sets;
}

// `graph` with `siblings` as one product and narrow views, or nullopt when a view's new layout
// changes a returned value's layout or cannot be read by what reads it.
std::optional<ir::Graph> rewrite(const ir::Graph& graph, const std::vector<Product>& siblings) {
  ir::Graph result = graph;
  MetaValues meta(result);
  std::vector<ir::Node> made;
  std::set<int> changed;
  try {
    ir::ValueListRef weights, biases;
    for (const auto& product : siblings) {
      weights.ids.push_back(product.weight);
      biases.ids.push_back(product.bias);
    }
    auto weight = make_node("aten::cat", "", {{"tensors", weights}, {"dim", std::int64_t{0}}});
    const int concatenated = type_result(result, meta, weight, -1);
    made.push_back(std::move(weight));
    auto transpose = make_node("aten::t", "", {{"self", ir::ValueRef{concatenated}}});
    const int transposed = type_result(result, meta, transpose, -1);
    made.push_back(std::move(transpose));
    const auto& first = graph.nodes[siblings.front().node];
    const Form form = form_of(siblings.front());
    int bias_id = -1;
    if (form != Form::Matmul) {
      auto bias = make_node("aten::cat", "", {{"tensors", biases}, {"dim", std::int64_t{0}}});
      bias_id = type_result(result, meta, bias, -1);
      made.push_back(std::move(bias));
    }
    ir::Node product;
    if (form == Form::Addmm) {
      product = make_node("aten::addmm", "", {{"self", ir::ValueRef{bias_id}},
                                              ir::copy_arg(first, "mat1"),
                                              {"mat2", ir::ValueRef{transposed}},
                                              ir::copy_arg(first, "beta"),
                                              ir::copy_arg(first, "alpha")});
    } else {
      product = make_node("aten::matmul", "", {ir::copy_arg(first, "self"), {"other", ir::ValueRef{transposed}}});
    }
    int columns = type_result(result, meta, product, -1);
    made.push_back(std::move(product));
    if (form == Form::MatmulThenBias) {
      const auto& first_add = graph.nodes[static_cast<std::size_t>(siblings.front().bias_add)];
      auto add = make_node("aten::add", "Tensor", {{"self", ir::ValueRef{columns}},
                                                   {"other", ir::ValueRef{bias_id}},
                                                   ir::copy_arg(first_add, "alpha")});
      columns = type_result(result, meta, add, -1);
      made.push_back(std::move(add));
    }
    std::int64_t start = 0;
    for (const auto& sibling : siblings) {
      const int out = sibling.result;
      const auto length = graph.value(sibling.weight).type.sizes[0];
      auto view = make_node("aten::narrow", "", {{"self", ir::ValueRef{columns}},
                                                 {"dim", std::int64_t{-1}},
                                                 {"start", start},
                                                 {"length", length}});
      const auto before = result.value(out).type.strides;
      type_result(result, meta, view, out);
      if (result.value(out).type.strides != before) changed.insert(out);
      made.push_back(std::move(view));
      start += length;
    }
  } catch (const std::exception&) {
    return std::nullopt;
  }
  std::set<std::size_t> removed;
  for (const auto& sibling : siblings) {
    removed.insert(sibling.node);
    if (sibling.bias_add >= 0) removed.insert(static_cast<std::size_t>(sibling.bias_add));
  }
  const auto after_made = splice_nodes(result, siblings.front().node, std::move(made), removed);
  if (!retype_readers(result, changed, after_made)) return std::nullopt;
  return result;
}

}  // namespace

void SiblingProducts::run(ir::Graph& graph, PassReport& report) {
  std::int64_t concatenated = 0, kept_apart = 0;
  std::set<int> refused;  // first products' results of sets whose rewrite was refused
  for (bool again = true; again;) {
    again = false;
    for (const auto& siblings : sibling_sets(graph, cuda_only_)) {
      const int first = graph.nodes[siblings.front().node].outputs.front();
      if (refused.count(first)) continue;
      if (auto rewritten = rewrite(graph, siblings)) {
        graph = std::move(*rewritten);
        concatenated += static_cast<std::int64_t>(siblings.size());
        again = true;
        break;
      }
      refused.insert(first);
      ++kept_apart;
    }
  }
  report.counters["concatenated"] = concatenated;
  if (kept_apart) report.counters["kept_apart"] = kept_apart;
}

}  // namespace zenith::passes
