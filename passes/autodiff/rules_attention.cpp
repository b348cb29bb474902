// Derivative rules of attention: scaled_dot_product_attention as a model calls it (through its math,
// the probabilities computed again in the backward), and the memory-efficient attention kernel the
// training rewrite puts in its place on CUDA (through ATen's fused backward kernel).
#include <cmath>
#include <limits>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "passes/autodiff/derivative_rules.h"
#include "zenith/error.h"

namespace zenith::autodiff {
namespace {

bool present(const RuleCall& c, const char* name) { return c.node().arg(name) != nullptr && !c.is_none(name); }

double softmax_scale(const RuleCall& c, const at::Tensor& query) {
  return c.is_none("scale") ? 1.0 / std::sqrt(static_cast<double>(query.size(-1))) : c.real("scale");
}

// softmax(q k^T * scale + mask) v, as ATen's math backend computes it (a boolean mask keeps where
// true, is_causal keeps the lower triangle from the top left, and a row with every key masked has
// probabilities 0, not NaN: _safe_softmax), differentiated by hand: the probabilities are computed
// again from q and k rather than saved, as the fused kernels do.
void scaled_dot_product_attention(const RuleCall& c, GradientSink& s) {
  if (c.real("dropout_p") != 0.0) {
    throw Error(fmt::format("{} with dropout_p {} differentiates only through the fused kernel the training "
                            "rewrite chooses on CUDA (its random numbers are the kernel's)",
                            c.node().qualified_name(), c.real("dropout_p")));
  }
  if (present(c, "enable_gqa") && c.flag("enable_gqa")) {
    throw Error(fmt::format("{} with enable_gqa has no derivative rule in Zenith", c.node().qualified_name()));
  }
  const auto& q = c.input("query");
  const auto& k = c.input("key");
  const auto& v = c.input("value");
  const double scale = softmax_scale(c, q);
  auto scores = at::matmul(q, k.transpose(-2, -1)) * scale;
  const bool masked = c.input_id("attn_mask") >= 0;
  if (masked) {
    const auto& mask = c.input("attn_mask");
    scores = mask.scalar_type() == at::kBool
                 ? scores.masked_fill(mask.logical_not(), -std::numeric_limits<double>::infinity())
                 : scores + mask;
  }
  if (c.flag("is_causal")) {
    auto keep = at::ones({q.size(-2), k.size(-2)}, q.options().dtype(at::kBool)).tril();
    scores = scores.masked_fill(keep.logical_not(), -std::numeric_limits<double>::infinity());
  }
  const auto probabilities = at::_safe_softmax(scores, -1);
  const auto& grad = c.grad();
  if (s.wanted(c, "value")) s.add(c, "value", at::matmul(probabilities.transpose(-2, -1), grad));
  const auto grad_scores = at::_softmax_backward_data(at::matmul(grad, v.transpose(-2, -1)), probabilities, -1,
                                                      probabilities.scalar_type());
  if (masked && s.wanted(c, "attn_mask")) s.add(c, "attn_mask", grad_scores);
  if (s.wanted(c, "query")) s.add(c, "query", at::matmul(grad_scores, k) * scale);
  if (s.wanted(c, "key")) s.add(c, "key", at::matmul(grad_scores.transpose(-2, -1), q) * scale);
}

// ATen's own backward of the memory-efficient kernel, from the log-sum-exp and the random-number
// seed and offset its forward returned: the dropout masks are the forward's.
void efficient_attention(const RuleCall& c, GradientSink& s) {
  if (c.input_id("attn_bias") < 0) {
    throw Error(fmt::format("{} without attn_bias: the training rewrite makes this node only with one",
                            c.node().qualified_name()));
  }
  const c10::List<bool> wanted({s.wanted(c, "query"), s.wanted(c, "key"), s.wanted(c, "value"),
                                s.wanted(c, "attn_bias")});
  const c10::IValue scale = c.is_none("scale") ? c10::IValue() : c10::IValue(c.real("scale"));
  auto grads = c.run("aten::_scaled_dot_product_efficient_attention_backward", "",
                     {c.grad(), c.input("query"), c.input("key"), c.input("value"), c.input("attn_bias"), c.output(0),
                      c.output(1), c.output(2), c.output(3), c.real("dropout_p"), wanted, c.flag("is_causal"), scale});
  const char* names[] = {"query", "key", "value", "attn_bias"};
  for (std::size_t k = 0; k < 4; ++k) {
    if (grads.at(k).defined() && wanted.get(k)) s.add(c, names[k], grads[k]);
  }
}

}  // namespace

void register_attention_rules(std::function<void(const std::string&, DerivativeRule)> add) {
  add("aten::scaled_dot_product_attention", scaled_dot_product_attention);
  add("aten::_scaled_dot_product_efficient_attention", efficient_attention);
}

}  // namespace zenith::autodiff
