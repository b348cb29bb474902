// Every derivative rule, through a compiled call in float64, against eager autograd and against
// finite differences, on fresh inputs at every call: the capture (eager autograd), then two calls
// of the compiled backward on values it has not seen.
#include <functional>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "passes/autodiff/derivative_rules.h"
#include "training/gradient_check.h"
#include "zenith/compile.h"

namespace {

namespace F = torch::nn::functional;
using zenith::testing::expect_close;
using Fn = std::function<at::Tensor(at::Tensor, at::Tensor, at::Tensor)>;

struct Case {
  std::string name;
  Fn fn;
  std::function<std::vector<at::Tensor>()> inputs;  // three float64 tensors (or index tensors)
  // Off where the function is not the derivative's integral: a float32 round trip, a padding
  // row that forward reads but autograd gives no gradient.
  bool finite_differences = true;
};

void PrintTo(const Case& c, std::ostream* out) { *out << c.name; }

at::Tensor leaf(std::vector<std::int64_t> sizes) {
  return torch::randn(sizes, torch::kDouble).requires_grad_(true);
}
at::Tensor positive(std::vector<std::int64_t> sizes) {
  return (torch::rand(sizes, torch::kDouble) + 0.5).requires_grad_(true);
}
at::Tensor unused() { return torch::zeros({1}, torch::kDouble); }

std::vector<Case> cases() {
  auto one = [](std::vector<std::int64_t> s) { return [s] { return std::vector<at::Tensor>{leaf(s), unused(), unused()}; }; };
  auto two = [](std::vector<std::int64_t> a, std::vector<std::int64_t> b) {
    return [a, b] { return std::vector<at::Tensor>{leaf(a), leaf(b), unused()}; };
  };
  auto three = [](std::vector<std::int64_t> a, std::vector<std::int64_t> b, std::vector<std::int64_t> c) {
    return [a, b, c] { return std::vector<at::Tensor>{leaf(a), leaf(b), leaf(c)}; };
  };
  return {
      // Elementwise, with broadcasting.
      {"arithmetic", [](at::Tensor a, at::Tensor b, at::Tensor c) { return (a + b) * c - a / (c * c + 1) - b * 2.5 + torch::rsub(a, 1.0) / 3; },
       three({3, 4}, {4}, {3, 1})},
      {"sub_rsub_neg", [](auto a, auto b, auto) { return torch::sub(a, b, 2) - torch::rsub(a, b, 0.5) + (-a); }, two({2, 5}, {2, 5})},
      {"pow", [](auto a, auto, auto) { return a.pow(2) + a.pow(3) * 0.5; }, one({4, 3})},
      {"pow_scalar_base", [](auto a, auto, auto) { return torch::pow(2.0, a); }, one({6})},
      {"roots_logs", [](auto a, auto, auto) { return a.rsqrt() + a.sqrt() + a.log() + a.reciprocal(); },
       [] { return std::vector<at::Tensor>{positive({3, 5}), unused(), unused()}; }},
      {"transcendental", [](auto a, auto, auto) { return a.exp() + a.tanh() + a.sigmoid() + a.sin() + a.cos() + a.erf(); }, one({4, 4})},
      {"activations", [](auto a, auto, auto) {
         return torch::relu(a) + F::silu(a) + torch::gelu(a) + torch::gelu(a * 2, "tanh") + a.abs();
       }, one({5, 6})},
      {"clamp_where_masked_fill", [](auto a, auto b, auto) {
         auto mask = b > 0;
         return a.clamp(-0.5, 0.7) + torch::where(mask, a, b * 3) + a.masked_fill(mask.logical_not(), 0.25) +
                a.clamp_min(0.1) * a.clamp_max(-0.2);
       }, two({4, 5}, {4, 5})},
      // Ties included: a maximum of a value with itself, and amax over rows holding their maximum twice
      // (each tie takes its share, as eager's rule gives it).
      {"maximum_minimum", [](auto a, auto b, auto) {
         return torch::maximum(a, b) * 1.5 + torch::minimum(a, b.sum(0)) + torch::maximum(a, a) - torch::minimum(b, b) * 0.5;
       }, two({3, 5}, {3, 5})},
      {"amax_amin", [](at::Tensor a, auto, auto) {
         auto tied = torch::cat({a, a.narrow(1, 0, 1)}, 1);  // every row's first value twice
         return torch::cat({a.amax(at::IntArrayRef{1}).flatten(), a.amin(at::IntArrayRef{0, 2}, true).flatten(),
                            tied.amax(at::IntArrayRef{}).flatten() * 2, tied.amin(1).flatten()});
       }, one({3, 4, 5})},
      {"lerp_addcmul", [](at::Tensor a, at::Tensor b, at::Tensor w) {
         return torch::lerp(a, b, 0.3) + torch::lerp(a, b, w) + torch::addcmul(a, b, w, 0.7) + torch::addcmul(w, a, a);
       }, three({4, 5}, {4, 5}, {5})},
      {"smooth_activations", [](auto a, auto, auto) {
         auto x = a * 3;  // both sides of elu's and leaky_relu's kink, and softplus's threshold at 20 / beta
         return F::elu(x, F::ELUFuncOptions().alpha(0.8)) + at::elu(x, 1.2, 0.9, 1.3) + F::leaky_relu(x, F::LeakyReLUFuncOptions().negative_slope(0.2)) +
                F::softplus(x, F::SoftplusFuncOptions().beta(7).threshold(4)) + F::softplus(x) + F::mish(x);
       }, one({6, 7})},
      {"var_std", [](auto a, auto, auto) {
         return torch::cat({at::var(a, at::IntArrayRef{1}, /*unbiased=*/true, /*keepdim=*/false).flatten(),
                            at::var(a, at::IntArrayRef{0, 2}, /*unbiased=*/false, /*keepdim=*/true).flatten(),
                            at::std(a, at::IntArrayRef{-1}, /*unbiased=*/true, /*keepdim=*/false).flatten()});
       }, one({3, 4, 5})},
      {"var_std_correction", [](auto a, auto, auto) {
         return torch::cat({at::std(a, at::IntArrayRef{1}, at::Scalar(2), /*keepdim=*/false).flatten(),
                            at::var(a, at::IntArrayRef{0, 1}, at::Scalar(0), /*keepdim=*/true).flatten()});
       }, one({3, 4, 5})},
      {"dtype_round_trip", [](auto a, auto, auto) { return a.to(torch::kFloat).to(torch::kDouble) * a; }, one({3, 3}), false},
      // The matrix-product family.
      {"mm_t", [](auto a, auto b, auto) { return a.mm(b.t()); }, two({3, 4}, {5, 4})},
      {"bmm", [](auto a, auto b, auto) { return a.bmm(b); }, two({2, 3, 4}, {2, 4, 5})},
      {"addmm", [](at::Tensor a, at::Tensor b, at::Tensor c) { return torch::addmm(c, a, b, 0.5, 2.0); }, three({3, 4}, {4, 5}, {5})},
      {"matmul_dot", [](auto a, auto b, auto) { return a.matmul(b); }, two({5}, {5})},
      {"matmul_batched_2d", [](auto a, auto b, auto) { return a.matmul(b); }, two({2, 3, 4}, {4, 5})},
      {"matmul_matrix_vector", [](auto a, auto b, auto) { return a.matmul(b); }, two({3, 4}, {4})},
      {"matmul_vector_matrix", [](auto a, auto b, auto) { return a.matmul(b); }, two({4}, {4, 5})},
      {"matmul_broadcast", [](auto a, auto b, auto) { return a.matmul(b); }, two({2, 1, 3, 4}, {5, 4, 6})},
      {"linear", [](at::Tensor a, at::Tensor b, at::Tensor c) { return F::linear(a, b, c); }, three({2, 3, 4}, {5, 4}, {5})},
      // einsum as Funnel's relative attention calls it, then with what einsum allows besides: an
      // ellipsis, a letter one operand sums alone, a size-1 dimension the other operand
      // broadcasts, three operands and the implicit result.
      {"einsum_attention", [](auto q, auto k, auto) {
         auto scores = torch::einsum("bind,bjnd->bnij", {q, k});
         return torch::einsum("bnij,bjnd->bind", {scores.softmax(-1), k.tanh()});
       }, two({2, 3, 2, 4}, {2, 5, 2, 4})},
      {"einsum_general", [](at::Tensor a, at::Tensor b, at::Tensor c) {
         return torch::cat({torch::einsum("...ij,jk->...ik", {a, b}).flatten(), torch::einsum("bij,jk->bi", {a, b}).flatten(),
                            torch::einsum("bij, bjk -> bik", {a.sum(0, true), a.transpose(1, 2).exp()}).flatten(),
                            torch::einsum("bij,jk,k", {a, b, c}).flatten()});
       }, three({2, 3, 4}, {4, 5}, {5})},
      // Views, reshapes, permutes, slicing, concatenation.
      {"views", [](auto a, auto, auto) {
         return a.view({3, 8}).transpose(0, 1).reshape({4, 6}).unsqueeze(1).squeeze(1).flatten() * 1.5;
       }, one({2, 3, 4})},
      {"permute_expand", [](auto a, auto b, auto) { return a.permute({2, 0, 1}) + b.expand({4, 2, 3}); }, two({2, 3, 4}, {1, 2, 3})},
      {"narrow_slice_select", [](auto a, auto, auto) {
         using torch::indexing::Slice;
         return a.narrow(1, 1, 3).sum(1) + a.index({Slice(), Slice(0, 6, 2)}).sum(1) + a.select(1, -1);
       }, one({4, 6})},
      {"cat_stack", [](at::Tensor a, at::Tensor b, at::Tensor c) { return torch::cat({a, -b, c}, 1).sum(0) + torch::stack({a, b}, 0).sum(1).sum(0)[0]; },
       three({2, 3}, {2, 3}, {2, 1})},
      // Splits, one piece unused (its gradient is zeros), numpy's .T, repeat, padding that pads
      // and crops: what the real-model suite's models call (tests/realmodels/test_realmodel_training.cpp).
      {"split_chunk_unbind", [](auto a, auto, auto) {
         auto chunks = a.chunk(3, 1);
         auto splits = a.split(2, 0);
         auto rows = a.unbind(0);
         return torch::cat({(chunks[0] * chunks[2]).flatten(), splits[1].flatten(), rows[0] * 2,
                            a.split_with_sizes({1, 3}, 0)[1].mean(0)});
       }, one({4, 6})},
      {"numpy_t_repeat", [](auto a, auto, auto) { return a.numpy_T().repeat({2, 1, 3}) * 1.5 + a.repeat({1, 2}).sum(); },
       one({3, 4})},
      {"pads", [](auto a, auto, auto) {
         return torch::cat({F::pad(a, F::PadFuncOptions({1, 2, -1, 0}).value(0.5)).flatten(),
                            at::constant_pad_nd(a, {0, 0, 2, 1}, 0).flatten()});
       }, one({2, 5, 6})},
      {"hard_activations", [](auto a, auto, auto) {
         auto x = a * 4;  // across the kinks at -3 and 3
         return at::hardtanh(x, -0.5, 0.7) + at::hardswish(x) + at::hardsigmoid(x) + F::relu6(x);
       }, one({6, 7})},
      // Indexing as relative position biases (Swin, BEiT) and DeBERTa's disentangled attention
      // read: a position read twice accumulates both gradients.
      {"index_gather", [](auto a, auto, auto) {
         auto rows = torch::tensor({0, 2, 2, 1}, torch::kLong);
         auto picks = torch::tensor({{0, 3, 3}, {1, 1, 0}, {2, 0, 3}}, torch::kLong);
         using torch::indexing::Slice;
         return torch::cat({a.index({rows}).flatten(), a.index({Slice(), torch::tensor({3, 3, 1}, torch::kLong)}).flatten(),
                            a.gather(1, picks).flatten()});
       }, one({3, 4})},
      // Swin's shifted windows and Swin V2's cosine attention.
      {"roll_normalize", [](auto a, auto, auto) {
         return torch::cat({a.roll({1, -2}, {0, 2}).flatten(), a.roll(3).flatten(),
                            F::normalize(a, F::NormalizeFuncOptions().dim(-1)).flatten(),
                            at::linalg_vector_norm(a, 2, at::IntArrayRef{0, 1}, true).flatten()});
       }, one({3, 4, 5})},
      {"group_norm", [](at::Tensor a, at::Tensor b, at::Tensor c) {
         return F::group_norm(a, F::GroupNormFuncOptions(2).weight(b).bias(c).eps(1e-5)) +
                F::group_norm(a * 2, F::GroupNormFuncOptions(3));
       }, three({2, 6, 5}, {6}, {6})},
      // Pooling and interpolation as image models call them.
      {"avg_pool2d", [](auto a, auto, auto) {
         return torch::cat({F::avg_pool2d(a, F::AvgPool2dFuncOptions(3).stride(2).padding(1).ceil_mode(true).count_include_pad(false)).flatten(),
                            F::avg_pool2d(a, F::AvgPool2dFuncOptions(2)).flatten()});
       }, one({2, 3, 7, 8})},
      {"interpolations", [](auto a, auto, auto) {
         using Mode = F::InterpolateFuncOptions;
         return torch::cat({F::interpolate(a, Mode().size(std::vector<std::int64_t>{7, 9}).mode(torch::kBilinear).align_corners(false)).flatten(),
                            F::interpolate(a, Mode().scale_factor(std::vector<double>{1.5, 2.0}).mode(torch::kBicubic).align_corners(false)).flatten(),
                            F::interpolate(a, Mode().size(std::vector<std::int64_t>{5, 6}).mode(torch::kBilinear).align_corners(true)).flatten(),
                            F::interpolate(a, Mode().scale_factor(std::vector<double>{2.0, 2.0}).mode(torch::kNearest)).flatten()});
       }, one({2, 3, 4, 5})},
      {"adaptive_avg_pool1d", [](auto a, auto, auto) {
         return torch::cat({F::adaptive_avg_pool1d(a, F::AdaptiveAvgPool1dFuncOptions(3)).flatten(),
                            F::adaptive_avg_pool1d(a, F::AdaptiveAvgPool1dFuncOptions(1)).flatten()});
       }, one({2, 3, 7})},
      // Wav2Vec2's positional convolution is weight-normalized along its kernel dimension.
      {"weight_norm", [](at::Tensor v, at::Tensor g, at::Tensor h) {
         return torch::cat({at::_weight_norm(v, g, 2).flatten(), at::_weight_norm(v, h, 0).flatten()});
       }, three({4, 3, 5}, {1, 1, 5}, {4, 1, 1})},
      {"unfold", [](auto a, auto, auto) { return F::unfold(a, F::UnfoldFuncOptions({2, 3}).padding(1).stride({2, 1})); },
       one({2, 3, 5, 6})},
      {"adaptive_avg_pool3d", [](auto a, auto, auto) {
         return torch::cat({F::adaptive_avg_pool3d(a, F::AdaptiveAvgPool3dFuncOptions({2, 1, 3})).flatten(),
                            F::adaptive_avg_pool3d(a, F::AdaptiveAvgPool3dFuncOptions(1)).flatten()});
       }, one({2, 3, 4, 5, 6})},
      // Reductions, softmax, log_softmax.
      {"sums_means", [](auto a, auto, auto) {
         return a.sum() + a.sum(at::IntArrayRef{0, 2}).sum() * a.mean() + a.mean(at::IntArrayRef{-1}, true).sum() + a.sum(1, true).mean();
       }, one({3, 4, 5})},
      {"softmax", [](auto a, auto, auto) { return torch::softmax(a, -1) * torch::log_softmax(a, 0); }, one({4, 7})},
      // Normalizations, convolution, pooling, embedding, losses.
      {"layer_norm", [](at::Tensor a, at::Tensor b, at::Tensor c) { return F::layer_norm(a, F::LayerNormFuncOptions({6}).weight(b).bias(c).eps(1e-5)); },
       three({3, 4, 6}, {6}, {6})},
      {"layer_norm_plain", [](auto a, auto, auto) { return F::layer_norm(a, F::LayerNormFuncOptions({4, 6})); }, one({3, 4, 6})},
      {"conv2d", [](at::Tensor a, at::Tensor b, at::Tensor c) { return F::conv2d(a, b, F::Conv2dFuncOptions().bias(c).stride(2).padding(1)); },
       three({2, 3, 9, 9}, {4, 3, 3, 3}, {4})},
      {"conv2d_groups", [](auto a, auto b, auto) { return F::conv2d(a, b, F::Conv2dFuncOptions().groups(2).dilation(2)); },
       two({1, 4, 8, 8}, {6, 2, 3, 3})},
      // Images need no gradient and there is no bias: the backward asks for the weight's alone.
      {"conv2d_weight_only", [](at::Tensor a, at::Tensor b, at::Tensor) { return F::conv2d(a, b, F::Conv2dFuncOptions().padding(1)); },
       [] { return std::vector<at::Tensor>{torch::randn({2, 3, 6, 6}, torch::kDouble), leaf({4, 3, 3, 3}), unused()}; }},
      {"max_pool", [](auto a, auto, auto) { return F::max_pool2d(a, F::MaxPool2dFuncOptions(3).stride(2).padding(1)); },
       one({2, 3, 9, 9})},
      {"adaptive_avg_pool", [](auto a, auto, auto) {
         return F::adaptive_avg_pool2d(a, F::AdaptiveAvgPool2dFuncOptions({1, 1})).flatten(1).sum(1) +
                F::adaptive_avg_pool2d(a, F::AdaptiveAvgPool2dFuncOptions({2, 3})).sum(at::IntArrayRef{1, 2, 3});
       }, one({2, 3, 7, 8})},
      {"embedding", [](auto weight, auto ids, auto) { return F::embedding(ids, weight); },
       [] { return std::vector<at::Tensor>{leaf({10, 4}), torch::randint(10, {3, 5}), unused()}; }},
      {"embedding_padding", [](auto weight, auto ids, auto) { return F::embedding(ids, weight, F::EmbeddingFuncOptions().padding_idx(1)); },
       [] { return std::vector<at::Tensor>{leaf({10, 4}), torch::randint(10, {3, 5}), unused()}; }, false},
      {"batch_norm_eval", [](at::Tensor a, at::Tensor b, at::Tensor c) {
         auto mean = torch::linspace(-1, 1, 3, torch::kDouble), var = torch::linspace(0.5, 2, 3, torch::kDouble);
         return F::batch_norm(a, mean, var, F::BatchNormFuncOptions().weight(b).bias(c).training(false));
       }, three({2, 3, 4, 4}, {3}, {3})},
      {"batch_norm_train", [](at::Tensor a, at::Tensor b, at::Tensor c) {
         return F::batch_norm(a, at::Tensor(), at::Tensor(), F::BatchNormFuncOptions().weight(b).bias(c).training(true));
       }, three({4, 3, 5, 5}, {3}, {3})},
      {"cross_entropy", [](auto logits, auto target, auto) {
         return F::cross_entropy(logits, target) + F::cross_entropy(logits, target, F::CrossEntropyFuncOptions().reduction(torch::kSum).ignore_index(2));
       }, [] { return std::vector<at::Tensor>{leaf({6, 5}), torch::randint(5, {6}), unused()}; }},
      {"cross_entropy_weighted_4d", [](at::Tensor logits, at::Tensor target, at::Tensor weight) {
         return F::cross_entropy(logits, target, F::CrossEntropyFuncOptions().weight(weight).reduction(torch::kNone)).sum();
       }, [] { return std::vector<at::Tensor>{leaf({2, 4, 3, 3}), torch::randint(4, {2, 3, 3}), torch::rand({4}, torch::kDouble) + 0.5}; }},
      {"nll_loss", [](auto logits, auto target, auto) { return F::nll_loss(torch::log_softmax(logits, 1), target); },
       [] { return std::vector<at::Tensor>{leaf({5, 7}), torch::randint(7, {5}), unused()}; }},
      // Attention as models call it: an explicit scale, a float mask needing its own gradient
      // (broadcast over heads), a boolean mask, the causal form with the default scale.
      {"sdpa", [](at::Tensor q, at::Tensor k, at::Tensor mask) {
         return at::scaled_dot_product_attention(q, k, k.tanh(), mask, 0.0, false, 0.3) +
                at::scaled_dot_product_attention(q, k, k, k.sum(-1, true).transpose(-2, -1) > 0);
       }, three({2, 3, 5, 4}, {2, 3, 6, 4}, {2, 1, 5, 6})},
      // Grouped-query attention (four query heads share each key-value head) and the repeat that
      // models without enable_gqa write themselves.
      {"sdpa_grouped_query", [](at::Tensor q, at::Tensor k, at::Tensor v) {
         return at::scaled_dot_product_attention(q, k, v, {}, 0.0, false, std::nullopt, /*enable_gqa=*/true) +
                at::scaled_dot_product_attention(q, k.repeat_interleave(4, 1), v.repeat_interleave(4, 1));
       }, three({2, 8, 5, 4}, {2, 2, 6, 4}, {2, 2, 6, 4})},
      {"repeat_interleave", [](auto a, auto, auto) {
         return torch::cat({a.repeat_interleave(3, 0).flatten(), a.repeat_interleave(2, -1).flatten(), a.repeat_interleave(2).flatten()});
       }, one({3, 4})},
      {"sdpa_causal", [](at::Tensor q, at::Tensor k, at::Tensor v) {
         return at::scaled_dot_product_attention(q, k, v, {}, 0.0, true);
       }, three({2, 2, 6, 8}, {2, 2, 6, 8}, {2, 2, 6, 3})},
  };
}

class DerivativeRule : public ::testing::TestWithParam<Case> {};

constexpr int kCalls = 3;  // the capture, then two calls of the compiled backward

TEST_P(DerivativeRule, MatchesEagerAndFiniteDifferences) {
  const auto& c = GetParam();
  torch::manual_seed(17);
  auto eager = [&](const std::vector<at::Tensor>& in) { return std::vector<at::Tensor>{c.fn(in[0], in[1], in[2])}; };
  zenith::CompileOptions options;
  options.name = c.name;
  options.fallback_to_eager = false;  // a missing rule must fail here, not run eagerly
  auto compiled = zenith::compile([fn = c.fn](at::Tensor a, at::Tensor b, at::Tensor x) { return fn(a, b, x); }, options);
  auto through_zenith = [&](const std::vector<at::Tensor>& in) {
    return std::vector<at::Tensor>{compiled(in[0], in[1], in[2])};
  };
  // Fresh inputs and projection weights at every call. 1e-9 relative: float64 through the same
  // derivative formulas, summed in other orders by the compiled backward; a gradient computed
  // from stale values is off by order one.
  for (int call = 0; call < kCalls; ++call) {
    const std::string what = c.name + ", call " + std::to_string(call) + (call == 0 ? " (the capture)" : "");
    auto inputs = c.inputs();
    std::vector<at::Tensor> reference;
    {
      torch::NoGradGuard no_grad;
      reference = eager(inputs);
    }
    auto weights = zenith::testing::projection_weights(reference);
    auto want = zenith::testing::gradients_of(eager, inputs, weights);
    auto got = zenith::testing::gradients_of(through_zenith, inputs, weights);
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      expect_close(got[i], want[i], 1e-9, 1e-12, what + ": input " + std::to_string(i));
    }
    if (call > 0 && c.finite_differences) zenith::testing::expect_directional_derivative(eager, inputs, weights, got, what);
  }
  ASSERT_TRUE(compiled.report().backward.compiled) << compiled.report().to_string();
  ASSERT_EQ(compiled.stats().training_calls, kCalls - 1);
}

INSTANTIATE_TEST_SUITE_P(Rules, DerivativeRule, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

TEST(DerivativeRules, CoverTheOpsTheIssueNames) {  // draws nothing
  auto ops = zenith::autodiff::differentiable_ops();
  for (const char* op : {"aten::add.Tensor", "aten::matmul", "aten::view", "aten::permute", "aten::slice.Tensor",
                         "aten::cat", "aten::sum.dim_IntList", "aten::softmax.int", "aten::log_softmax.int",
                         "aten::native_layer_norm", "aten::embedding", "aten::_convolution",
                         "aten::native_batch_norm", "aten::max_pool2d_with_indices", "aten::adaptive_avg_pool2d",
                         "aten::native_dropout", "aten::cross_entropy_loss", "aten::nll_loss_nd", "aten::rsqrt",
                         "aten::pow.Tensor_Scalar", "aten::mean.dim", "aten::scaled_dot_product_attention",
                         "aten::_scaled_dot_product_efficient_attention"}) {
    EXPECT_NE(std::find(ops.begin(), ops.end(), op), ops.end()) << op;
  }
}

}  // namespace
