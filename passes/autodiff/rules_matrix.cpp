// Derivative rules of the matrix-product family.
#include <ATen/ATen.h>

#include "passes/autodiff/derivative_rules.h"
#include "passes/autodiff/einsum_equation.h"

namespace zenith::autodiff {
namespace {

void t(const RuleCall& c, GradientSink& s) { s.add(c, "self", c.grad().t()); }

void mm(const RuleCall& c, GradientSink& s) {
  if (s.wanted(c, "self")) s.add(c, "self", c.grad().mm(c.input("mat2").t()));
  if (s.wanted(c, "mat2")) s.add(c, "mat2", c.input("self").t().mm(c.grad()));
}

void bmm(const RuleCall& c, GradientSink& s) {
  if (s.wanted(c, "self")) s.add(c, "self", c.grad().bmm(c.input("mat2").transpose(1, 2)));
  if (s.wanted(c, "mat2")) s.add(c, "mat2", c.input("self").transpose(1, 2).bmm(c.grad()));
}

void addmm(const RuleCall& c, GradientSink& s) {
  const auto alpha = c.scalar("alpha");
  if (s.wanted(c, "self")) s.add(c, "self", c.grad() * c.scalar("beta"));
  if (s.wanted(c, "mat1")) s.add(c, "mat1", c.grad().mm(c.input("mat2").t()) * alpha);
  if (s.wanted(c, "mat2")) s.add(c, "mat2", c.input("mat1").t().mm(c.grad()) * alpha);
}

// [..., k] x [k, n] with any leading dims: the weight's gradient is one matrix product over the
// flattened rows rather than a batched product summed afterwards.
at::Tensor rows_t_mm(const at::Tensor& rows, const at::Tensor& grad) {
  return rows.reshape({-1, rows.size(-1)}).t().mm(grad.reshape({-1, grad.size(-1)}));
}

// matmul's broadcasting semantics: 1-D operands gain a dimension (removed from the result), batch
// dimensions broadcast (their gradient is summed back by the sink).
void matmul(const RuleCall& c, GradientSink& s) {
  at::Tensor a = c.input("self"), b = c.input("other"), g = c.grad();
  const bool a_vector = a.dim() == 1, b_vector = b.dim() == 1;
  if (a_vector && b_vector) {
    if (s.wanted(c, "self")) s.add(c, "self", g * b);
    if (s.wanted(c, "other")) s.add(c, "other", g * a);
    return;
  }
  if (a_vector) {
    a = a.unsqueeze(0);
    g = g.unsqueeze(-2);
  }
  if (b_vector) {
    b = b.unsqueeze(-1);
    g = g.unsqueeze(-1);
  }
  if (s.wanted(c, "self")) {
    auto ga = g.matmul(b.transpose(-1, -2));
    if (a_vector) ga = ga.squeeze(-2);
    s.add(c, "self", ga);
  }
  if (s.wanted(c, "other")) {
    at::Tensor gb;
    if (b.dim() == 2 && !b_vector) gb = rows_t_mm(a, g);
    else gb = a.transpose(-1, -2).matmul(g);
    if (b_vector) gb = gb.sum_to_size(b.sizes()).squeeze(-1);
    s.add(c, "other", gb);
  }
}

void linear(const RuleCall& c, GradientSink& s) {
  const auto& g = c.grad();
  const auto& weight = c.input("weight");
  if (s.wanted(c, "input")) s.add(c, "input", g.matmul(weight));
  if (s.wanted(c, "weight")) s.add(c, "weight", rows_t_mm(g, c.input("input")));
  if (s.wanted(c, "bias")) s.add(c, "bias", g.reshape({-1, g.size(-1)}).sum(0));
}

// Each operand's gradient is one einsum of the result's gradient with the other operands
// (passes/autodiff/einsum_equation.h), broadcast along the letters only that operand names (they
// were summed within it); a dimension of size 1 the others broadcast is summed back by the sink.
void einsum(const RuleCall& c, GradientSink& s) {
  const auto operands = c.inputs("tensors");
  std::vector<std::int64_t> ranks;
  for (const auto& operand : operands) ranks.push_back(operand.dim());
  const auto equation = parse_einsum_equation(c.text("equation"), ranks);
  for (std::size_t k = 0; k < operands.size(); ++k) {
    const auto gradient = einsum_gradient(equation, k);  // throws for a diagonal: the call runs eagerly
    std::vector<at::Tensor> factors{c.grad()};
    for (std::size_t j = 0; j < operands.size(); ++j) {
      if (j != k) factors.push_back(operands[j]);
    }
    auto g = at::einsum(gradient.equation, factors);
    for (auto d : gradient.lone_dims) g = g.unsqueeze(d);
    std::vector<std::int64_t> sizes = g.sizes().vec();
    for (std::size_t d = 0; d < sizes.size(); ++d) {
      if (sizes[d] == 1) sizes[d] = operands[k].size(static_cast<std::int64_t>(d));
    }
    s.add_element(c, "tensors", k, g.expand(sizes));
  }
}

}  // namespace

void register_matrix_rules(std::function<void(const std::string&, DerivativeRule)> add) {
  add("aten::t", t);
  add("aten::mm", mm);
  add("aten::bmm", bmm);
  add("aten::addmm", addmm);
  add("aten::matmul", matmul);
  add("aten::linear", linear);
  add("aten::einsum", einsum);
}

}  // namespace zenith::autodiff
