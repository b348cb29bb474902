#include "training/gradient_check.h"

#include <fmt/format.h>

namespace zenith::testing {

std::vector<at::Tensor> projection_weights(const std::vector<at::Tensor>& outputs) {
  std::vector<at::Tensor> weights;
  for (const auto& out : outputs) {
    weights.push_back(at::isFloatingType(out.scalar_type()) ? torch::randn(out.sizes(), out.options()) : at::Tensor());
  }
  return weights;
}

at::Tensor project(const std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& weights) {
  at::Tensor total;
  for (std::size_t k = 0; k < outputs.size(); ++k) {
    if (!weights[k].defined()) continue;
    auto term = (outputs[k] * weights[k]).sum();
    total = total.defined() ? total + term : term;
  }
  return total;
}

std::vector<at::Tensor> gradients_of(const std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>& fn,
                                     const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& weights) {
  std::vector<at::Tensor> leaves;
  for (const auto& input : inputs) leaves.push_back(input.detach().clone().requires_grad_(input.requires_grad()));
  project(fn(leaves), weights).backward();
  std::vector<at::Tensor> grads;
  for (const auto& leaf : leaves) grads.push_back(leaf.requires_grad() ? leaf.grad() : at::Tensor());
  return grads;
}

void expect_directional_derivative(
    const std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>& fn,
    const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& weights,
    const std::vector<at::Tensor>& gradients, const std::string& what) {
  torch::NoGradGuard no_grad;
  const double eps = 1e-6;
  std::vector<at::Tensor> plus, minus;
  double predicted = 0;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].requires_grad()) {
      plus.push_back(inputs[i]);
      minus.push_back(inputs[i]);
      continue;
    }
    auto direction = torch::randn_like(inputs[i]);
    plus.push_back(inputs[i].detach() + eps * direction);
    minus.push_back(inputs[i].detach() - eps * direction);
    ASSERT_TRUE(gradients[i].defined()) << what << ": input " << i << " got no gradient";
    predicted += (gradients[i] * direction).sum().item<double>();
  }
  const double measured =
      (project(fn(plus), weights) - project(fn(minus), weights)).item<double>() / (2 * eps);
  EXPECT_NEAR(measured, predicted, 1e-5 * (1 + std::abs(predicted))) << what << ": finite differences";
}

void expect_close(const at::Tensor& a, const at::Tensor& b, double rtol, double atol, const std::string& what) {
  ASSERT_EQ(a.defined(), b.defined()) << what << ": one gradient is missing";
  if (!a.defined()) return;
  ASSERT_EQ(a.sizes(), b.sizes()) << what;
  ASSERT_EQ(a.scalar_type(), b.scalar_type()) << what;
  auto x = a.to(at::kDouble), y = b.to(at::kDouble);
  auto excess = ((x - y).abs() - (atol + rtol * y.abs())).max().item<double>();
  EXPECT_LE(excess, 0.0) << what << ": differs by up to " << (x - y).abs().max().item<double>() << " (atol " << atol
                         << ", rtol " << rtol << ")";
}

}  // namespace zenith::testing
