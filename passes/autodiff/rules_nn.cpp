// Derivative rules of the neural-network ops: normalizations, convolution, pooling, embedding,
// dropout and the losses. Most go through ATen's own backward ops.
#include <array>
#include <optional>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/Reduction.h>
#include <c10/core/WrapDimMinimal.h>
#include <fmt/format.h>

#include "passes/autodiff/derivative_rules.h"
#include "zenith/error.h"

namespace zenith::autodiff {
namespace {

at::Tensor optional_input(const RuleCall& c, const char* name) {
  return c.input_id(name) >= 0 ? c.input(name) : at::Tensor();
}

// Every gradient of the normalizations: their weight and bias gradients are small reductions the
// backward kernel computes anyway. An absent weight is passed as ones (the same input gradient).
c10::List<bool> all3() { return c10::List<bool>({true, true, true}); }

at::Tensor weight_or_ones(const at::Tensor& weight, at::IntArrayRef sizes, const at::Tensor& like) {
  return weight.defined() ? weight : at::ones(sizes, like.options());
}

c10::IValue maybe(const at::Tensor& tensor) { return tensor.defined() ? c10::IValue(tensor) : c10::IValue(); }

void add3(const RuleCall& c, GradientSink& s, const std::vector<at::Tensor>& grads, const char* a, const char* b,
          const char* d) {
  if (grads.at(0).defined()) s.add(c, a, grads[0]);
  if (grads.at(1).defined()) s.add(c, b, grads[1]);
  if (grads.at(2).defined()) s.add(c, d, grads[2]);
}

// The ATen backward ops below take a `bool[3] output_mask`, which the tracer cannot record: they
// go through RuleCall::run.
std::vector<at::Tensor> layer_norm_backward(const RuleCall& c, const at::Tensor& input,
                                            const std::vector<std::int64_t>& shape, const at::Tensor& mean,
                                            const at::Tensor& rstd, const at::Tensor& weight, const at::Tensor& bias) {
  auto present_weight = weight_or_ones(weight, shape, input);
  auto present_bias = bias.defined() ? bias : at::zeros(shape, input.options());
  return c.run("aten::native_layer_norm_backward", "",
               {c.grad(), input, shape, mean, rstd, present_weight, present_bias, all3()});
}

std::vector<at::Tensor> batch_norm_backward(const RuleCall& c, const at::Tensor& input,
                                            const at::Tensor& weight, const at::Tensor& running_mean,
                                            const at::Tensor& running_var, const at::Tensor& save_mean,
                                            const at::Tensor& save_invstd, bool training) {
  return c.run("aten::native_batch_norm_backward", "",
               {c.grad(), input, weight_or_ones(weight, {input.size(1)}, input), maybe(running_mean),
                maybe(running_var), maybe(save_mean), maybe(save_invstd), training, c.real("eps"), all3()});
}

void native_layer_norm(const RuleCall& c, GradientSink& s) {
  add3(c, s,
       layer_norm_backward(c, c.input("input"), c.integers("normalized_shape"), c.output(1), c.output(2),
                           optional_input(c, "weight"), optional_input(c, "bias")),
       "input", "weight", "bias");
}

// layer_norm not split into native_layer_norm (training_rewrite does that): the statistics are
// computed again.
void layer_norm(const RuleCall& c, GradientSink& s) {
  const auto& input = c.input("input");
  const auto shape = c.integers("normalized_shape");
  auto weight = optional_input(c, "weight"), bias = optional_input(c, "bias");
  auto stats = at::native_layer_norm(input, shape, weight, bias, c.real("eps"));
  add3(c, s, layer_norm_backward(c, input, shape, std::get<1>(stats), std::get<2>(stats), weight, bias), "input",
       "weight", "bias");
}

// Weight normalization, w = v * g / |v| with the norm over every dimension but `dim`: both
// gradients from the product rule, as elementwise work and one reduction.
void weight_norm(const RuleCall& c, GradientSink& s) {
  const auto& v = c.input("v");
  const auto& g = c.input("g");
  const auto dim = c.integer("dim");
  auto norm = at::norm_except_dim(v, 2, dim);
  std::vector<std::int64_t> others;
  for (std::int64_t d = 0; d < v.dim(); ++d) {
    if (dim == -1 || d != c10::maybe_wrap_dim(dim, v.dim())) others.push_back(d);
  }
  auto along = (c.grad() * v).sum(others, /*keepdim=*/true);
  if (s.wanted(c, "g")) s.add(c, "g", along / norm);
  if (s.wanted(c, "v")) s.add(c, "v", g / norm * (c.grad() - v * (along / (norm * norm))));
}

// group_norm: its statistics computed again (as layer_norm's where training_rewrite left it),
// then ATen's backward.
void group_norm(const RuleCall& c, GradientSink& s) {
  const auto& input = c.input("input");
  const auto batch = input.size(0), channels = input.size(1);
  const auto per_channel = batch * channels == 0 ? 0 : input.numel() / (batch * channels);
  const auto groups = c.integer("num_groups");
  auto weight = optional_input(c, "weight"), bias = optional_input(c, "bias");
  auto stats = at::native_group_norm(input, weight, bias, batch, channels, per_channel, groups, c.real("eps"));
  add3(c, s,
       c.run("aten::native_group_norm_backward", "",
             {c.grad().contiguous(), input, std::get<1>(stats), std::get<2>(stats), maybe(weight), batch, channels,
              per_channel, groups, c10::List<bool>({true, weight.defined(), bias.defined()})}),
       "input", "weight", "bias");
}

void native_batch_norm(const RuleCall& c, GradientSink& s) {
  const bool training = c.flag("training");
  add3(c, s,
       batch_norm_backward(c, c.input("input"), optional_input(c, "weight"), optional_input(c, "running_mean"),
                           optional_input(c, "running_var"), training ? c.output(1) : at::Tensor(),
                           training ? c.output(2) : at::Tensor(), training),
       "input", "weight", "bias");
}

// cuDNN's backward takes no output mask: the tracer records it.
void cudnn_batch_norm(const RuleCall& c, GradientSink& s) {
  const auto& input = c.input("input");
  auto grads = at::cudnn_batch_norm_backward(input, c.grad().contiguous(input.suggest_memory_format()), c.input("weight"),
                                             optional_input(c, "running_mean"), optional_input(c, "running_var"),
                                             c.output(1), c.output(2), c.real("epsilon"), c.output(3));
  add3(c, s, {std::get<0>(grads), std::get<1>(grads), std::get<2>(grads)}, "input", "weight", "bias");
}

// batch_norm in evaluation mode (training mode is split into native_batch_norm by
// training_rewrite; should one remain, its batch statistics are computed again).
void batch_norm(const RuleCall& c, GradientSink& s) {
  const bool training = c.flag("training");
  const auto& input = c.input("input");
  auto weight = optional_input(c, "weight");
  auto running_mean = optional_input(c, "running_mean"), running_var = optional_input(c, "running_var");
  at::Tensor save_mean, save_invstd;
  if (training) {
    auto stats = at::native_batch_norm(input, weight, optional_input(c, "bias"), {}, {}, true, 0.0, c.real("eps"));
    save_mean = std::get<1>(stats);
    save_invstd = std::get<2>(stats);
  }
  add3(c, s, batch_norm_backward(c, input, weight, running_mean, running_var, save_mean, save_invstd, training),
       "input", "weight", "bias");
}

void convolution_with(const RuleCall& c, GradientSink& s, bool transposed, std::vector<std::int64_t> output_padding) {
  const auto& input = c.input("input");
  const auto& weight = c.input("weight");
  const auto stride = c.integers("stride");
  if (output_padding.empty()) output_padding.assign(stride.size(), 0);
  // Only the gradients wanted: a convolution without a bias would otherwise reduce the whole output
  // gradient once more, and the first one would compute a gradient for the images.
  const bool has_bias = c.input_id("bias") >= 0;
  c10::IValue bias_sizes;
  if (has_bias) bias_sizes = std::vector<std::int64_t>{c.grad().size(1)};
  const c10::List<bool> mask({s.wanted(c, "input"), s.wanted(c, "weight"), has_bias && s.wanted(c, "bias")});
  auto grads = c.run("aten::convolution_backward", "",
                     {c.grad(), input, weight, bias_sizes, stride, c.integers("padding"), c.integers("dilation"),
                      transposed, output_padding, c.integer("groups"), mask});
  add3(c, s, grads, "input", "weight", "bias");
}

void convolution(const RuleCall& c, GradientSink& s) {
  convolution_with(c, s, c.flag("transposed"), c.integers("output_padding"));
}
void convnd(const RuleCall& c, GradientSink& s) { convolution_with(c, s, false, {}); }

void embedding(const RuleCall& c, GradientSink& s) {
  if (c.flag("sparse")) {
    throw Error("sparse embedding gradients are not compiled; build the embedding with sparse=false");
  }
  s.add(c, "weight",
        at::embedding_dense_backward(c.grad(), c.input("indices"), c.input("weight").size(0), c.integer("padding_idx"),
                                     c.flag("scale_grad_by_freq")));
}

void max_pool2d_with_indices(const RuleCall& c, GradientSink& s) {
  s.add(c, "self",
        at::max_pool2d_with_indices_backward(c.grad(), c.input("self"), c.integers("kernel_size"), c.integers("stride"),
                                             c.integers("padding"), c.integers("dilation"), c.flag("ceil_mode"),
                                             c.output(1)));
}

// max_pool2d not split into max_pool2d_with_indices: the indices are found again.
void max_pool2d(const RuleCall& c, GradientSink& s) {
  const auto kernel = c.integers("kernel_size");
  auto stride = c.integers("stride");
  if (stride.empty()) stride = kernel;
  auto pooled = at::max_pool2d_with_indices(c.input("self"), kernel, stride, c.integers("padding"),
                                            c.integers("dilation"), c.flag("ceil_mode"));
  s.add(c, "self",
        at::max_pool2d_with_indices_backward(c.grad(), c.input("self"), kernel, stride, c.integers("padding"),
                                             c.integers("dilation"), c.flag("ceil_mode"), std::get<1>(pooled)));
}

void adaptive_avg_pool2d(const RuleCall& c, GradientSink& s) {
  const auto& self = c.input("self");
  const auto& out = c.output();
  // A global pool's gradient is a broadcast: elementwise, so it fuses with its neighbours.
  if (out.size(-1) == 1 && out.size(-2) == 1) {
    s.add(c, "self", c.grad().expand(self.sizes()) / static_cast<double>(self.size(-1) * self.size(-2)));
    return;
  }
  s.add(c, "self", at::_adaptive_avg_pool2d_backward(c.grad(), self));
}

void adaptive_avg_pool3d(const RuleCall& c, GradientSink& s) {
  s.add(c, "self", at::_adaptive_avg_pool3d_backward(c.grad(), c.input("self")));
}

// The 1-d pool as the 2-d one over a height of 1.
void adaptive_avg_pool1d(const RuleCall& c, GradientSink& s) {
  const auto& self = c.input("self");
  if (c.output().size(-1) == 1) {
    s.add(c, "self", c.grad().expand(self.sizes()) / static_cast<double>(self.size(-1)));
    return;
  }
  s.add(c, "self", at::_adaptive_avg_pool2d_backward(c.grad().unsqueeze(-2), self.unsqueeze(-2)).squeeze(-2));
}

void avg_pool2d(const RuleCall& c, GradientSink& s) {
  const auto kernel = c.integers("kernel_size");
  auto stride = c.integers("stride");
  if (stride.empty()) stride = kernel;
  std::optional<std::int64_t> divisor;
  if (!c.is_none("divisor_override")) divisor = c.integer("divisor_override");
  s.add(c, "self",
        at::avg_pool2d_backward(c.grad(), c.input("self"), kernel, stride, c.integers("padding"), c.flag("ceil_mode"),
                                c.flag("count_include_pad"), divisor));
}

// The interpolations: their scales, where the call gave them, choose the source coordinates as
// much as the sizes do, so the backward gets the same ones. The `.vec` overloads take them as one
// list; the others one per dimension.
std::optional<double> scale_at(const RuleCall& c, const char* name, std::size_t k) {
  const auto* argument = c.node().arg(name);
  if (argument == nullptr) return std::nullopt;
  if (const auto* list = std::get_if<std::vector<double>>(&argument->value)) return list->at(k);
  if (const auto* value = std::get_if<double>(&argument->value)) return *value;
  return std::nullopt;
}

struct Interpolation {
  std::vector<std::int64_t> output_size, input_size;
  std::optional<double> scale_h, scale_w;
};

Interpolation interpolation_of(const RuleCall& c, const char* input_name) {
  Interpolation in;
  in.output_size = {c.output().size(-2), c.output().size(-1)};
  in.input_size = c.input(input_name).sizes().vec();
  const bool vec = c.node().arg("scale_factors") != nullptr;
  in.scale_h = scale_at(c, vec ? "scale_factors" : "scales_h", 0);
  in.scale_w = scale_at(c, vec ? "scale_factors" : "scales_w", vec ? 1 : 0);
  return in;
}

const char* image_argument(const RuleCall& c) { return c.node().arg("input") != nullptr ? "input" : "self"; }

// Bilinear and bicubic interpolation take the same arguments, align_corners among them.
void upsample_aligned2d(const RuleCall& c, GradientSink& s, bool bicubic) {
  const char* name = image_argument(c);
  const auto in = interpolation_of(c, name);
  const bool align_corners = c.flag("align_corners");
  s.add(c, name,
        bicubic ? at::upsample_bicubic2d_backward(c.grad(), in.output_size, in.input_size, align_corners, in.scale_h,
                                                  in.scale_w)
                : at::upsample_bilinear2d_backward(c.grad(), in.output_size, in.input_size, align_corners, in.scale_h,
                                                   in.scale_w));
}

void upsample_bilinear2d(const RuleCall& c, GradientSink& s) { upsample_aligned2d(c, s, /*bicubic=*/false); }
void upsample_bicubic2d(const RuleCall& c, GradientSink& s) { upsample_aligned2d(c, s, /*bicubic=*/true); }

void upsample_nearest2d(const RuleCall& c, GradientSink& s) {
  const char* name = image_argument(c);
  const auto in = interpolation_of(c, name);
  s.add(c, name, at::upsample_nearest2d_backward(c.grad(), in.output_size, in.input_size, in.scale_h, in.scale_w));
}

// unfold's patches summed back into place.
void im2col(const RuleCall& c, GradientSink& s) {
  const auto& self = c.input("self");
  s.add(c, "self",
        at::col2im(c.grad(), {self.size(-2), self.size(-1)}, c.integers("kernel_size"), c.integers("dilation"),
                   c.integers("padding"), c.integers("stride")));
}

void native_dropout(const RuleCall& c, GradientSink& s) {
  const double p = c.real("p");
  const bool train = c.is_none("train") || c.flag("train");
  if (!train) return s.add(c, "input", c.grad());
  const double scale = p >= 1.0 ? 0.0 : 1.0 / (1.0 - p);
  s.add(c, "input", at::native_dropout_backward(c.grad(), c.output(1), scale));
}

// Dropout that draws nothing (train=false); training_rewrite turns the drawing kind into
// native_dropout, whose mask the backward reads.
void dropout(const RuleCall& c, GradientSink& s) {
  if (c.flag("train") && c.real("p") > 0.0) {
    throw Error("dropout in training mode must keep its mask (training_rewrite makes it native_dropout)");
  }
  s.add(c, "input", c.grad());
}

// nll_loss over [N, C] or [C] goes to ATen's backward; other ranks (classes on dim 1) are
// flattened to [M, C] first.
at::Tensor nll_gradient(const at::Tensor& grad, const at::Tensor& self, const at::Tensor& target,
                        const at::Tensor& weight, std::int64_t reduction, std::int64_t ignore_index) {
  if (self.dim() <= 2) {
    auto total_weight = std::get<1>(at::nll_loss_forward(self, target, weight, reduction, ignore_index));
    return at::nll_loss_backward(grad, self, target, weight, reduction, ignore_index, total_weight);
  }
  auto moved = self.movedim(1, -1);
  auto flat = moved.reshape({-1, self.size(1)});
  auto flat_grad = reduction == at::Reduction::None ? grad.reshape(-1) : grad;
  auto flat_input_grad = nll_gradient(flat_grad, flat, target.reshape(-1), weight, reduction, ignore_index);
  return flat_input_grad.reshape(moved.sizes()).movedim(-1, 1);
}

void nll_loss(const RuleCall& c, GradientSink& s) {
  s.add(c, "self",
        nll_gradient(c.grad(), c.input("self"), c.input("target"), optional_input(c, "weight"), c.integer("reduction"),
                     c.integer("ignore_index")));
}

// cross_entropy_loss not split by training_rewrite: log_softmax is computed again.
void cross_entropy_loss(const RuleCall& c, GradientSink& s) {
  const auto& self = c.input("self");
  const auto& target = c.input("target");
  if (c.real("label_smoothing") != 0.0 || at::isFloatingType(target.scalar_type())) {
    throw Error("cross_entropy_loss with label smoothing or class probabilities as targets has no derivative rule");
  }
  const std::int64_t class_dim = self.dim() == 1 ? 0 : 1;
  auto log_probs = at::log_softmax(self, class_dim);
  auto grad = nll_gradient(c.grad(), log_probs, target, optional_input(c, "weight"), c.integer("reduction"),
                           c.integer("ignore_index"));
  s.add(c, "self", at::_log_softmax_backward_data(grad, log_probs, class_dim, self.scalar_type()));
}

}  // namespace

void register_nn_rules(std::function<void(const std::string&, DerivativeRule)> add) {
  add("aten::native_layer_norm", native_layer_norm);
  add("aten::layer_norm", layer_norm);
  add("aten::group_norm", group_norm);
  add("aten::_weight_norm", weight_norm);
  add("aten::native_batch_norm", native_batch_norm);
  add("aten::cudnn_batch_norm", cudnn_batch_norm);
  add("aten::batch_norm", batch_norm);
  add("aten::_convolution", convolution);
  add("aten::convolution", convolution);
  add("aten::conv1d", convnd);
  add("aten::conv2d", convnd);
  add("aten::conv3d", convnd);
  add("aten::embedding", embedding);
  add("aten::max_pool2d_with_indices", max_pool2d_with_indices);
  add("aten::max_pool2d", max_pool2d);
  add("aten::adaptive_avg_pool2d", adaptive_avg_pool2d);
  add("aten::_adaptive_avg_pool2d", adaptive_avg_pool2d);
  add("aten::adaptive_avg_pool3d", adaptive_avg_pool3d);
  add("aten::_adaptive_avg_pool3d", adaptive_avg_pool3d);
  add("aten::adaptive_avg_pool1d", adaptive_avg_pool1d);
  add("aten::avg_pool2d", avg_pool2d);
  add("aten::upsample_bilinear2d", upsample_bilinear2d);
  add("aten::upsample_bilinear2d.vec", upsample_bilinear2d);
  add("aten::upsample_bicubic2d", upsample_bicubic2d);
  add("aten::upsample_bicubic2d.vec", upsample_bicubic2d);
  add("aten::upsample_nearest2d", upsample_nearest2d);
  add("aten::upsample_nearest2d.vec", upsample_nearest2d);
  add("aten::im2col", im2col);
  add("aten::native_dropout", native_dropout);
  add("aten::dropout", dropout);
  add("aten::nll_loss_nd", nll_loss);
  add("aten::nll_loss", nll_loss);
  add("aten::nll_loss2d", nll_loss);
  add("aten::cross_entropy_loss", cross_entropy_loss);
}

}  // namespace zenith::autodiff
