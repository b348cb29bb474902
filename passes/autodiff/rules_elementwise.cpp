// Derivative rules of elementwise ops. Broadcasting and dtype are the sink's job: a rule may hand
// back a gradient in the result's shape and dtype.
#include <cmath>

#include <ATen/ATen.h>

#include "passes/autodiff/derivative_rules.h"

namespace zenith::autodiff {
namespace {

void identity(const RuleCall& c, GradientSink& s) { s.add(c, "self", c.grad()); }

// contiguous changes the layout, not the values: the gradient goes back laid out as the input was
// (a channels-last copy of a weight gives the weight a gradient in the weight's own layout).
void relayout(const RuleCall& c, GradientSink& s) {
  s.add(c, "self", c.grad().contiguous(c.input("self").suggest_memory_format()));
}

// grad * alpha, or grad itself when alpha is 1 (as autograd's maybe_multiply): a multiplication by
// one would cost a kernel over the whole gradient in every backward.
at::Tensor times_alpha(const RuleCall& c) {
  return c.real("alpha") == 1.0 ? c.grad() : c.grad() * c.scalar("alpha");
}

at::Tensor times_minus_alpha(const RuleCall& c) {
  return c.real("alpha") == 1.0 ? -c.grad() : c.grad() * -c.real("alpha");
}

void add_tensor(const RuleCall& c, GradientSink& s) {
  s.add(c, "self", c.grad());
  if (s.wanted(c, "other")) s.add(c, "other", times_alpha(c));
}

void sub_tensor(const RuleCall& c, GradientSink& s) {
  s.add(c, "self", c.grad());
  if (s.wanted(c, "other")) s.add(c, "other", times_minus_alpha(c));
}

// rsub(self, other, alpha) = other - alpha * self
void rsub_tensor(const RuleCall& c, GradientSink& s) {
  if (s.wanted(c, "self")) s.add(c, "self", times_minus_alpha(c));
  s.add(c, "other", c.grad());
}

void rsub_scalar(const RuleCall& c, GradientSink& s) { s.add(c, "self", times_minus_alpha(c)); }

void mul_tensor(const RuleCall& c, GradientSink& s) {
  if (s.wanted(c, "self")) s.add(c, "self", c.grad() * c.input("other"));
  if (s.wanted(c, "other")) s.add(c, "other", c.grad() * c.input("self"));
}

void mul_scalar(const RuleCall& c, GradientSink& s) { s.add(c, "self", c.grad() * c.scalar("other")); }

void div_tensor(const RuleCall& c, GradientSink& s) {
  const auto& other = c.input("other");
  if (s.wanted(c, "self")) s.add(c, "self", c.grad() / other);
  // d(a / b)/db = -a / b^2 = -(a / b) / b: the result is at hand.
  if (s.wanted(c, "other")) s.add(c, "other", -c.grad() * c.output() / other);
}

void div_scalar(const RuleCall& c, GradientSink& s) { s.add(c, "self", c.grad() / c.scalar("other")); }

void neg(const RuleCall& c, GradientSink& s) { s.add(c, "self", -c.grad()); }

void pow_tensor_scalar(const RuleCall& c, GradientSink& s) {
  const double exponent = c.real("exponent");
  const auto& self = c.input("self");
  if (exponent == 0.0) return s.add(c, "self", at::zeros_like(self));
  if (exponent == 2.0) return s.add(c, "self", c.grad() * self * 2.0);
  s.add(c, "self", c.grad() * exponent * self.pow(exponent - 1.0));
}

// pow(self: Scalar, exponent: Tensor) = self^exponent; d/dexponent = result * log(self)
void pow_scalar(const RuleCall& c, GradientSink& s) {
  const double base = c.real("self");
  s.add(c, "exponent", c.grad() * c.output() * std::log(base));
}

void rsqrt(const RuleCall& c, GradientSink& s) {
  const auto& y = c.output();
  s.add(c, "self", c.grad() * y * y * y * -0.5);
}

void sqrt(const RuleCall& c, GradientSink& s) { s.add(c, "self", c.grad() / (c.output() * 2.0)); }
void exp(const RuleCall& c, GradientSink& s) { s.add(c, "self", c.grad() * c.output()); }
void log(const RuleCall& c, GradientSink& s) { s.add(c, "self", c.grad() / c.input("self")); }
void tanh(const RuleCall& c, GradientSink& s) { s.add(c, "self", at::tanh_backward(c.grad(), c.output())); }
void sigmoid(const RuleCall& c, GradientSink& s) { s.add(c, "self", at::sigmoid_backward(c.grad(), c.output())); }
void relu(const RuleCall& c, GradientSink& s) { s.add(c, "self", at::threshold_backward(c.grad(), c.output(), 0)); }
void silu(const RuleCall& c, GradientSink& s) { s.add(c, "self", at::silu_backward(c.grad(), c.input("self"))); }
void sin(const RuleCall& c, GradientSink& s) { s.add(c, "self", c.grad() * c.input("self").cos()); }
void cos(const RuleCall& c, GradientSink& s) { s.add(c, "self", c.grad() * -c.input("self").sin()); }
void abs(const RuleCall& c, GradientSink& s) { s.add(c, "self", c.grad() * c.input("self").sgn()); }

void reciprocal(const RuleCall& c, GradientSink& s) {
  const auto& y = c.output();
  s.add(c, "self", c.grad() * -(y * y));
}

void gelu(const RuleCall& c, GradientSink& s) {
  const auto* approximate = std::get_if<std::string>(&c.node().arg("approximate")->value);
  s.add(c, "self", at::gelu_backward(c.grad(), c.input("self"), approximate ? *approximate : "none"));
}

void erf(const RuleCall& c, GradientSink& s) {
  const auto& x = c.input("self");
  s.add(c, "self", c.grad() * (2.0 / std::sqrt(M_PI)) * (-(x * x)).exp());
}

void masked_fill_scalar(const RuleCall& c, GradientSink& s) {
  s.add(c, "self", c.grad().masked_fill(c.input("mask"), 0));
}

void where_self(const RuleCall& c, GradientSink& s) {
  const auto& condition = c.input("condition");
  auto zero = at::zeros({}, c.grad().options());
  if (s.wanted(c, "self")) s.add(c, "self", at::where(condition, c.grad(), zero));
  if (s.wanted(c, "other")) s.add(c, "other", at::where(condition, zero, c.grad()));
}

// Gradient passes where the value was not clamped (eager's convention at the bounds included).
void clamp(const RuleCall& c, GradientSink& s) {
  const auto& x = c.input("self");
  auto keep = at::ones_like(x, at::kBool);
  if (!c.is_none("min")) keep = keep.logical_and(x >= c.scalar("min"));
  if (!c.is_none("max")) keep = keep.logical_and(x <= c.scalar("max"));
  s.add(c, "self", c.grad() * keep);
}

// The piecewise-linear activations, as eager's backward kernels define them at the kinks:
// hardtanh (ReLU6 among them) passes strictly inside its bounds, hardswish is 0 below -3 and
// x / 3 + 1/2 up to 3 inclusive. Elementwise, so they fuse with their neighbours. hardsigmoid goes
// through ATen's backward op: its slope is 1/6 rounded to float32 in every dtype (eager's
// kernels write `1.0f / 6.0f`), which a float64 formula would not reproduce.
void hardtanh(const RuleCall& c, GradientSink& s) {
  const auto& x = c.input("self");
  s.add(c, "self", c.grad() * (x > c.scalar("min_val")).logical_and(x < c.scalar("max_val")));
}

void relu6(const RuleCall& c, GradientSink& s) {
  const auto& x = c.input("self");
  s.add(c, "self", c.grad() * (x > 0.0).logical_and(x < 6.0));
}

void hardswish(const RuleCall& c, GradientSink& s) {
  const auto& x = c.input("self");
  auto zero = at::zeros({}, c.grad().options());
  s.add(c, "self", at::where(x < -3.0, zero, at::where(x <= 3.0, c.grad() * (x / 3.0 + 0.5), c.grad())));
}

void hardsigmoid(const RuleCall& c, GradientSink& s) {
  s.add(c, "self", at::hardsigmoid_backward(c.grad(), c.input("self")));
}

void clamp_min(const RuleCall& c, GradientSink& s) {
  s.add(c, "self", c.grad() * (c.input("self") >= c.scalar("min")));
}

void clamp_max(const RuleCall& c, GradientSink& s) {
  s.add(c, "self", c.grad() * (c.input("self") <= c.scalar("max")));
}

// Where self and other are equal each gets half the gradient, as ATen's rule gives it (so that the
// two halves sum to the gradient of a maximum of a value with itself).
at::Tensor split_at_ties(const RuleCall& c) {
  return at::where(c.input("self") == c.input("other"), c.grad() / 2, c.grad());
}

void maximum(const RuleCall& c, GradientSink& s) {
  const auto& self = c.input("self");
  const auto& other = c.input("other");
  const auto shared = split_at_ties(c);
  if (s.wanted(c, "self")) s.add(c, "self", shared.masked_fill(self < other, 0));
  if (s.wanted(c, "other")) s.add(c, "other", shared.masked_fill(self > other, 0));
}

void minimum(const RuleCall& c, GradientSink& s) {
  const auto& self = c.input("self");
  const auto& other = c.input("other");
  const auto shared = split_at_ties(c);
  if (s.wanted(c, "self")) s.add(c, "self", shared.masked_fill(self > other, 0));
  if (s.wanted(c, "other")) s.add(c, "other", shared.masked_fill(self < other, 0));
}

// lerp(self, end, weight) = self + weight * (end - self).
void lerp_scalar(const RuleCall& c, GradientSink& s) {
  const double weight = c.real("weight");
  if (s.wanted(c, "self")) s.add(c, "self", c.grad() * (1.0 - weight));
  if (s.wanted(c, "end")) s.add(c, "end", c.grad() * weight);
}

void lerp_tensor(const RuleCall& c, GradientSink& s) {
  const auto& weight = c.input("weight");
  if (s.wanted(c, "self")) s.add(c, "self", c.grad() * (1 - weight));
  if (s.wanted(c, "end")) s.add(c, "end", c.grad() * weight);
  if (s.wanted(c, "weight")) s.add(c, "weight", c.grad() * (c.input("end") - c.input("self")));
}

// addcmul(self, tensor1, tensor2, value) = self + value * tensor1 * tensor2.
void addcmul(const RuleCall& c, GradientSink& s) {
  const auto scaled = c.real("value") == 1.0 ? c.grad() : c.grad() * c.scalar("value");
  s.add(c, "self", c.grad());
  if (s.wanted(c, "tensor1")) s.add(c, "tensor1", scaled * c.input("tensor2"));
  if (s.wanted(c, "tensor2")) s.add(c, "tensor2", scaled * c.input("tensor1"));
}

// The activations below as ATen's backward kernels compute them, in elementwise ops the fusion
// pass groups (ATen's *_backward ops would each run alone).

// elu(x) = scale * (x > 0 ? x : alpha * (exp(x * input_scale) - 1)); x = 0 takes the negative side.
void elu(const RuleCall& c, GradientSink& s) {
  const auto& x = c.input("self");
  const double alpha = c.real("alpha"), scale = c.real("scale"), input_scale = c.real("input_scale");
  const auto negative = c.grad() * (alpha * scale * input_scale) * at::exp(x * input_scale);
  s.add(c, "self", at::where(x <= 0, negative, c.grad() * scale));
}

void leaky_relu(const RuleCall& c, GradientSink& s) {
  const auto& x = c.input("self");
  s.add(c, "self", at::where(x > 0, c.grad(), c.grad() * c.scalar("negative_slope")));
}

// softplus(x) = log1p(exp(beta * x)) / beta, and x itself where beta * x exceeds the threshold.
void softplus(const RuleCall& c, GradientSink& s) {
  const auto& x = c.input("self");
  const auto scaled = x * c.scalar("beta");
  const auto z = at::exp(scaled);
  s.add(c, "self", at::where(scaled > c.scalar("threshold"), c.grad(), c.grad() * z / (z + 1)));
}

// mish(x) = x * tanh(softplus(x)): tanh(sp) + x * sigmoid(x) * (1 - tanh(sp)^2).
void mish(const RuleCall& c, GradientSink& s) {
  const auto& x = c.input("self");
  const auto tanh_softplus = at::tanh(at::log1p(at::exp(x)));
  s.add(c, "self", c.grad() * (tanh_softplus + x * at::sigmoid(x) * (1 - tanh_softplus * tanh_softplus)));
}

// A dtype conversion: the gradient goes back to the input's dtype (the sink casts).
void convert(const RuleCall& c, GradientSink& s) { s.add(c, "self", c.grad()); }

}  // namespace

void register_elementwise_rules(std::function<void(const std::string&, DerivativeRule)> add) {
  add("aten::add.Tensor", add_tensor);
  add("aten::add.Scalar", identity);
  add("aten::sub.Tensor", sub_tensor);
  add("aten::sub.Scalar", identity);
  add("aten::rsub.Tensor", rsub_tensor);
  add("aten::rsub.Scalar", rsub_scalar);
  add("aten::mul.Tensor", mul_tensor);
  add("aten::mul.Scalar", mul_scalar);
  add("aten::div.Tensor", div_tensor);
  add("aten::div.Scalar", div_scalar);
  add("aten::neg", neg);
  add("aten::pow.Tensor_Scalar", pow_tensor_scalar);
  add("aten::pow.Scalar", pow_scalar);
  add("aten::rsqrt", rsqrt);
  add("aten::sqrt", sqrt);
  add("aten::exp", exp);
  add("aten::log", log);
  add("aten::tanh", tanh);
  add("aten::sigmoid", sigmoid);
  add("aten::relu", relu);
  add("aten::silu", silu);
  add("aten::gelu", gelu);
  add("aten::erf", erf);
  add("aten::sin", sin);
  add("aten::cos", cos);
  add("aten::abs", abs);
  add("aten::reciprocal", reciprocal);
  add("aten::masked_fill.Scalar", masked_fill_scalar);
  add("aten::where.self", where_self);
  add("aten::clamp", clamp);
  add("aten::clamp_min", clamp_min);
  add("aten::clamp_max", clamp_max);
  add("aten::hardtanh", hardtanh);
  add("aten::relu6", relu6);
  add("aten::hardswish", hardswish);
  add("aten::hardsigmoid", hardsigmoid);
  add("aten::maximum", maximum);
  add("aten::minimum", minimum);
  add("aten::lerp.Scalar", lerp_scalar);
  add("aten::lerp.Tensor", lerp_tensor);
  add("aten::addcmul", addcmul);
  add("aten::elu", elu);
  add("aten::leaky_relu", leaky_relu);
  add("aten::softplus", softplus);
  add("aten::mish", mish);
  add("aten::to.dtype", convert);
  add("aten::to.dtype_layout", convert);
  add("aten::to.device", convert);
  add("aten::to.other", convert);
  add("aten::type_as", convert);
  add("aten::_to_copy", convert);
  add("aten::_autocast_to_reduced_precision", convert);
  add("aten::_autocast_to_full_precision", convert);
  add("aten::contiguous", relayout);
  add("aten::clone", identity);
  add("aten::alias", identity);
}

}  // namespace zenith::autodiff
