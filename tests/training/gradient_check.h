// Checking gradients through a compiled call against eager autograd and finite differences.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "zenith/compile.h"

namespace zenith::testing {

/// Random weights for a scalar projection of `outputs`: loss = sum_k sum(outputs[k] * weights[k]).
/// Fresh weights make every output element's gradient different.
std::vector<at::Tensor> projection_weights(const std::vector<at::Tensor>& outputs);
at::Tensor project(const std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& weights);

/// The gradients of `inputs` (those requiring one) of the projection of fn(inputs); each input is
/// cloned fresh so nothing accumulates between calls.
std::vector<at::Tensor> gradients_of(const std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>& fn,
                                     const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& weights);

/// The central difference of the projection along a random direction per input requiring a
/// gradient, against the gradients' inner product with it. float64 only.
void expect_directional_derivative(
    const std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>& fn,
    const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& weights,
    const std::vector<at::Tensor>& gradients, const std::string& what);

/// Expects |a - b| <= atol + rtol * |b| everywhere; names `what` on failure.
void expect_close(const at::Tensor& a, const at::Tensor& b, double rtol, double atol, const std::string& what);

}  // namespace zenith::testing
