// Derivative rules of reductions and of softmax and log_softmax.
#include <ATen/ATen.h>
#include <c10/core/WrapDimMinimal.h>
#include <fmt/format.h>

#include "passes/autodiff/derivative_rules.h"
#include "zenith/error.h"

namespace zenith::autodiff {
namespace {

// The reduced dimensions of a `dim` argument (None or empty: all), wrapped and sorted.
std::vector<std::int64_t> reduced_dims(const RuleCall& c, std::int64_t rank) {
  std::vector<std::int64_t> dims = c.is_none("dim") ? std::vector<std::int64_t>{} : c.integers("dim");
  if (dims.empty()) {
    for (std::int64_t d = 0; d < rank; ++d) dims.push_back(d);
  }
  for (auto& d : dims) d = c10::maybe_wrap_dim(d, rank);
  std::sort(dims.begin(), dims.end());
  return dims;
}

// The gradient of a reduction's result spread back over the input's sizes.
at::Tensor spread(const RuleCall& c, const at::Tensor& grad, bool keepdim) {
  const auto& self = c.input("self");
  at::Tensor g = grad;
  if (!keepdim) {
    for (auto d : reduced_dims(c, self.dim())) g = g.unsqueeze(d);
  }
  return g.expand(self.sizes());
}

std::int64_t reduced_count(const RuleCall& c) {
  const auto& self = c.input("self");
  std::int64_t count = 1;
  for (auto d : reduced_dims(c, self.dim())) count *= self.size(d);
  return count;
}

void sum_all(const RuleCall& c, GradientSink& s) { s.add(c, "self", c.grad().expand(c.input("self").sizes())); }
void sum_dim(const RuleCall& c, GradientSink& s) { s.add(c, "self", spread(c, c.grad(), c.flag("keepdim"))); }

void mean_all(const RuleCall& c, GradientSink& s) {
  const auto& self = c.input("self");
  s.add(c, "self", c.grad().expand(self.sizes()) / static_cast<double>(self.numel()));
}

void mean_dim(const RuleCall& c, GradientSink& s) {
  s.add(c, "self", spread(c, c.grad(), c.flag("keepdim")) / static_cast<double>(reduced_count(c)));
}

// The Euclidean norm (Python's F.normalize calls linalg_vector_norm, LibTorch's norm; Swin V2's
// cosine attention): x / |x| times the result's gradient, and nothing where the norm is 0
// (eager's convention: no direction to follow there).
void vector_norm(const RuleCall& c, GradientSink& s) {
  const char* order = c.node().arg("ord") != nullptr ? "ord" : "p";
  if (!c.is_none(order) && c.real(order) != 2.0) {
    throw Error(fmt::format("{} has a derivative rule for the Euclidean norm only", c.node().qualified_name()));
  }
  const auto& norm = c.output();
  auto scaled = (c.grad() / norm).masked_fill(norm == 0, 0);
  s.add(c, "self", c.input("self") * spread(c, scaled, c.flag("keepdim")));
}

// amax and amin: the gradient goes to the elements equal to the result, split evenly among ties
// (ATen's rule).
void extremum(const RuleCall& c, GradientSink& s) {
  const auto& self = c.input("self");
  const bool keepdim = c.flag("keepdim");
  const auto hits = (self == spread(c, c.output(), keepdim)).to(self.scalar_type());
  const auto count = hits.sum(reduced_dims(c, self.dim()), /*keepdim=*/true);
  s.add(c, "self", spread(c, c.grad(), keepdim) / count * hits);
}

// The correction of var and std: `unbiased` (var.dim) or `correction` (var.correction; None is 1).
double correction_of(const RuleCall& c) {
  if (c.node().arg("unbiased") != nullptr) return c.flag("unbiased") ? 1.0 : 0.0;
  return c.is_none("correction") ? 1.0 : c.real("correction");
}

// d var / dx = 2 (x - mean) / (N - correction).
at::Tensor variance_gradient(const RuleCall& c, const at::Tensor& grad) {
  const auto& self = c.input("self");
  const auto deviations = self - self.mean(reduced_dims(c, self.dim()), /*keepdim=*/true);
  const double scale = 2.0 / (static_cast<double>(reduced_count(c)) - correction_of(c));
  return spread(c, grad, c.flag("keepdim")) * scale * deviations;
}

void var(const RuleCall& c, GradientSink& s) { s.add(c, "self", variance_gradient(c, c.grad())); }

// std = sqrt(var): the variance's gradient is grad / (2 std), and nothing where std is 0 (ATen's).
void standard_deviation(const RuleCall& c, GradientSink& s) {
  const auto& result = c.output();
  s.add(c, "self", variance_gradient(c, (c.grad() / (result * 2)).masked_fill(result == 0, 0)));
}

void softmax(const RuleCall& c, GradientSink& s) {
  const auto& self = c.input("self");
  s.add(c, "self", at::_softmax_backward_data(c.grad(), c.output(), c.integer("dim"), self.scalar_type()));
}

void log_softmax(const RuleCall& c, GradientSink& s) {
  const auto& self = c.input("self");
  s.add(c, "self", at::_log_softmax_backward_data(c.grad(), c.output(), c.integer("dim"), self.scalar_type()));
}

}  // namespace

void register_reduction_rules(std::function<void(const std::string&, DerivativeRule)> add) {
  add("aten::sum", sum_all);
  add("aten::sum.dim_IntList", sum_dim);
  add("aten::mean", mean_all);
  add("aten::mean.dim", mean_dim);
  add("aten::linalg_vector_norm", vector_norm);
  add("aten::norm.ScalarOpt_dim", vector_norm);
  add("aten::amax", extremum);
  add("aten::amin", extremum);
  add("aten::var.dim", var);
  add("aten::var.correction", var);
  add("aten::std.dim", standard_deviation);
  add("aten::std.correction", standard_deviation);
  add("aten::softmax.int", softmax);
  add("aten::_softmax", softmax);
  add("aten::log_softmax.int", log_softmax);
  add("aten::_log_softmax", log_softmax);
}

}  // namespace zenith::autodiff
