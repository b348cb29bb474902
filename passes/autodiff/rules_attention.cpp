// Derivative rules of attention: scaled_dot_product_attention as a model calls it (through its math,
// the probabilities computed again in the backward), and the fused kernels the training rewrite
// puts in its place on CUDA (cuDNN's, flash, memory-efficient: through ATen's fused backward ops).
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
    throw Error(fmt::format("{} with dropout_p {} differentiates only through the fused kernel eager would run "
                            "(its random numbers are the kernel's): on CUDA with inputs that kernel takes as they are",
                            c.node().qualified_name(), c.real("dropout_p")));
  }
  const auto& q = c.input("query");
  // Grouped-query attention: each key-value head serves `group` query heads in turn, as ATen's
  // math backend repeats them; the repeated heads' gradients sum back into their head.
  const std::int64_t kv_heads = c.input("key").dim() >= 3 ? c.input("key").size(-3) : 1;
  const std::int64_t group =
      present(c, "enable_gqa") && c.flag("enable_gqa") && q.dim() >= 3 ? q.size(-3) / kv_heads : 1;
  auto shared = [&](const at::Tensor& t) { return group == 1 ? t : t.repeat_interleave(group, -3); };
  auto summed = [&](const at::Tensor& t) { return group == 1 ? t : t.unflatten(-3, {kv_heads, group}).sum(-3); };
  const auto k = shared(c.input("key"));
  const auto v = shared(c.input("value"));
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
  if (s.wanted(c, "value")) s.add(c, "value", summed(at::matmul(probabilities.transpose(-2, -1), grad)));
  const auto grad_scores = at::_softmax_backward_data(at::matmul(grad, v.transpose(-2, -1)), probabilities, -1,
                                                      probabilities.scalar_type());
  if (masked && s.wanted(c, "attn_mask")) s.add(c, "attn_mask", grad_scores);
  if (s.wanted(c, "query")) s.add(c, "query", at::matmul(grad_scores, k) * scale);
  if (s.wanted(c, "key")) s.add(c, "key", summed(at::matmul(grad_scores.transpose(-2, -1), q) * scale));
}

// An optional tensor argument as the fused backward ops take it: a tensor, undefined when absent.
c10::IValue tensor_or_undefined(const RuleCall& c, const char* name) {
  return c.input_id(name) >= 0 ? c10::IValue(c.input(name)) : c10::IValue(at::Tensor());
}

c10::IValue scale_of(const RuleCall& c) { return c.is_none("scale") ? c10::IValue() : c10::IValue(c.real("scale")); }

void add_qkv(const RuleCall& c, GradientSink& s, const std::vector<at::Tensor>& grads) {
  const char* names[] = {"query", "key", "value"};
  for (std::size_t k = 0; k < 3; ++k) {
    if (grads.at(k).defined() && s.wanted(c, names[k])) s.add(c, names[k], grads[k]);
  }
}

// The fused kernels' backward ops below are ATen's own, from what their forward returned: the
// log-sum-exp and the random-number seed and offset, so the dropout masks are the forward's.

void efficient_attention(const RuleCall& c, GradientSink& s) {
  const bool biased = c.input_id("attn_bias") >= 0;
  const c10::List<bool> wanted({s.wanted(c, "query"), s.wanted(c, "key"), s.wanted(c, "value"),
                                biased && s.wanted(c, "attn_bias")});
  auto grads = c.run("aten::_scaled_dot_product_efficient_attention_backward", "",
                     {c.grad(), c.input("query"), c.input("key"), c.input("value"), tensor_or_undefined(c, "attn_bias"),
                      c.output(0), c.output(1), c.output(2), c.output(3), c.real("dropout_p"), wanted,
                      c.flag("is_causal"), scale_of(c)});
  add_qkv(c, s, grads);
  if (wanted.get(3) && grads.at(3).defined()) s.add(c, "attn_bias", grads[3]);
}

// cuDNN's backward gives the mask no gradient: the training rewrite chooses this kernel only for a
// mask that needs none.
void cudnn_attention(const RuleCall& c, GradientSink& s) {
  if (c.input_id("attn_bias") >= 0 && s.wanted(c, "attn_bias")) {
    throw Error(fmt::format("{}: the mask needs a gradient and cuDNN's attention backward gives it none",
                            c.node().qualified_name()));
  }
  const auto& q = c.input("query");
  const auto& k = c.input("key");
  auto grads = c.run("aten::_scaled_dot_product_cudnn_attention_backward", "",
                     {c.grad(), q, k, c.input("value"), c.output(0), c.output(1), c.output(6), c.output(7),
                      tensor_or_undefined(c, "attn_bias"), at::Tensor(), at::Tensor(), q.size(2), k.size(2),
                      c.real("dropout_p"), c.flag("is_causal"), scale_of(c)});
  add_qkv(c, s, grads);
}

void flash_attention(const RuleCall& c, GradientSink& s) {
  const auto& q = c.input("query");
  const auto& k = c.input("key");
  auto grads = c.run("aten::_scaled_dot_product_flash_attention_backward", "",
                     {c.grad(), q, k, c.input("value"), c.output(0), c.output(1), at::Tensor(), at::Tensor(), q.size(2),
                      k.size(2), c.real("dropout_p"), c.flag("is_causal"), c.output(6), c.output(7), scale_of(c)});
  add_qkv(c, s, grads);
}

}  // namespace

void register_attention_rules(std::function<void(const std::string&, DerivativeRule)> add) {
  add("aten::scaled_dot_product_attention", scaled_dot_product_attention);
  add("aten::_scaled_dot_product_efficient_attention", efficient_attention);
  add("aten::_scaled_dot_product_cudnn_attention", cudnn_attention);
  add("aten::_scaled_dot_product_flash_attention", flash_attention);
}

}  // namespace zenith::autodiff
