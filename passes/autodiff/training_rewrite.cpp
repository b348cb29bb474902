#include "passes/autodiff/training_rewrite.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <utility>

#include <c10/core/ScalarType.h>

#include "core/node_arguments.h"
#include "passes/autodiff/fused_attention_kernels.h"
#include "passes/cross_entropy_steps.h"

namespace zenith::autodiff {
namespace {

using ir::copy_arg;
using ir::flag_arg;

// 0 where the argument is absent or holds no number.
double real(const ir::Node& node, const char* name) { return ir::number_arg(node, name).value_or(0.0); }

class Rewriter {
 public:
  explicit Rewriter(ir::Graph& graph) : graph_(graph) {}

  TrainingRewrite run() {
    std::vector<ir::Node> nodes;
    nodes.reserve(graph_.nodes.size());
    for (auto& node : graph_.nodes) {
      if (node.op == "aten::dropout" && flag_arg(node, "train") && real(node, "p") > 0.0) {
        nodes.push_back(native(node, "aten::native_dropout", {copy_arg(node, "input"), copy_arg(node, "p"),
                                                              copy_arg(node, "train")}, 1));
      } else if (node.op == "aten::batch_norm" && flag_arg(node, "training") && eager_uses_cudnn(node)) {
        nodes.push_back(native(node, "aten::cudnn_batch_norm",
                               {copy_arg(node, "input"), copy_arg(node, "weight"), copy_arg(node, "bias"),
                                copy_arg(node, "running_mean"), copy_arg(node, "running_var"),
                                copy_arg(node, "training"), copy_arg(node, "momentum", "exponential_average_factor"),
                                copy_arg(node, "eps", "epsilon")},
                               3));
      } else if (node.op == "aten::batch_norm" && flag_arg(node, "training")) {
        nodes.push_back(native(node, "aten::native_batch_norm",
                               {copy_arg(node, "input"), copy_arg(node, "weight"), copy_arg(node, "bias"),
                                copy_arg(node, "running_mean"), copy_arg(node, "running_var"),
                                copy_arg(node, "training"), copy_arg(node, "momentum"), copy_arg(node, "eps")},
                               2));
      } else if (node.op == "aten::layer_norm") {
        nodes.push_back(native(node, "aten::native_layer_norm",
                               {copy_arg(node, "input"), copy_arg(node, "normalized_shape"), copy_arg(node, "weight"),
                                copy_arg(node, "bias"), copy_arg(node, "eps")},
                               2));
      } else if (node.op == "aten::max_pool2d") {
        nodes.push_back(native(node, "aten::max_pool2d_with_indices",
                               {copy_arg(node, "self"), copy_arg(node, "kernel_size"), copy_arg(node, "stride"),
                                copy_arg(node, "padding"), copy_arg(node, "dilation"), copy_arg(node, "ceil_mode")},
                               1));
      } else if (passes::splits_into_cross_entropy_steps(graph_, node)) {
        for (auto& step : passes::cross_entropy_steps(graph_, node, std::nullopt,
                                                      [&](const ir::Node&, int logits) { return provisional_like(logits); })) {
          nodes.push_back(std::move(step));
        }
      } else if (auto kernel = eager_attention_kernel(graph_, node); kernel != AttentionKernel::None) {
        ++attention_kernels_;
        auto fresh = [&](const ir::TensorType& type) { return provisional_value(type); };
        for (auto& step : fused_attention_nodes(graph_, node, kernel, fresh)) nodes.push_back(std::move(step));
      } else if (node.op == "aten::matmul" && batched(node)) {
        for (const char* operand : {"self", "other"}) make_foldable(node, operand, nodes);
        nodes.push_back(std::move(node));
      } else {
        nodes.push_back(std::move(node));
      }
    }
    graph_.nodes = std::move(nodes);
    return {std::move(provisional_), attention_kernels_};
  }

 private:
  // Same first result, `extra` new results after it.
  ir::Node native(const ir::Node& node, const char* op, std::vector<ir::Argument> args, int extra) {
    ir::Node replacement;
    replacement.op = op;
    replacement.args = std::move(args);
    replacement.outputs = {node.outputs.at(0)};
    for (int k = 0; k < extra; ++k) replacement.outputs.push_back(provisional_like(node.outputs[0]));
    return replacement;
  }

  int provisional_like(int id) { return provisional_value(graph_.value(id).type); }

  int provisional_value(const ir::TensorType& type) {
    int fresh = graph_.add_value(type, ir::ValueRole::Intermediate);
    provisional_.push_back(fresh);
    return fresh;
  }

  bool reads_value(const ir::Node& node, const char* name) const {
    const auto* arg = node.arg(name);
    return arg != nullptr && std::holds_alternative<ir::ValueRef>(arg->value);
  }

  // Where eager batch_norm itself runs cuDNN's kernels, Zenith runs the same ones, so that its batch
  // statistics round as eager's do, and cuDNN's fused backward. ATen's choice
  // (_select_batch_norm_backend): CUDA input of at least three dimensions, neither input nor weight
  // bfloat16 (cuDNN's batch norm takes a bfloat16 input only with a bfloat16 weight, which ATen
  // does not ask of it), a float16 input only with a float32 weight, affine parameters and running
  // statistics, a batch of at most 880801, fewer than 2^31-1 elements, cudnn_enabled and eps of at
  // least cuDNN's minimum.
  bool eager_uses_cudnn(const ir::Node& node) const {
    const auto* input = std::get_if<ir::ValueRef>(&node.arg("input")->value);
    const auto* weight = std::get_if<ir::ValueRef>(&node.arg("weight")->value);
    if (input == nullptr || weight == nullptr || !flag_arg(node, "cudnn_enabled")) return false;
    const auto& type = graph_.value(input->id).type;
    const auto weight_dtype = graph_.value(weight->id).type.dtype;
    const bool dtypes = (type.dtype == c10::kFloat && weight_dtype != c10::kBFloat16) ||
                        (type.dtype == c10::kHalf && weight_dtype == c10::kFloat);
    return type.device.is_cuda() && dtypes && type.rank() >= 3 && type.sizes[0] <= 880801 &&
           type.numel() < std::numeric_limits<std::int32_t>::max() && reads_value(node, "bias") &&
           reads_value(node, "running_mean") && reads_value(node, "running_var") && real(node, "eps") >= 1e-5;
  }

  // Both operands have batch dimensions: matmul folds them into one with reshape, which copies an
  // operand whose batch dimensions do not fold (attention's permuted heads).
  bool batched(const ir::Node& node) const {
    for (const char* operand : {"self", "other"}) {
      const auto* ref = std::get_if<ir::ValueRef>(&node.arg(operand)->value);
      if (ref == nullptr || graph_.value(ref->id).type.rank() < 3) return false;
    }
    return true;
  }

  // Row-major, or row-major but for its last two dimensions swapped (a transposed matrix, which
  // the batched product reads as it is).
  static bool folds(const ir::TensorType& type) {
    auto dense = [&](const std::vector<std::int64_t>& order) {
      std::int64_t expected = 1;
      for (auto d = order.rbegin(); d != order.rend(); ++d) {
        if (type.sizes[*d] != 1 && type.strides[*d] != expected) return false;
        expected *= type.sizes[*d];
      }
      return true;
    };
    std::vector<std::int64_t> order(type.sizes.size());
    for (std::size_t d = 0; d < order.size(); ++d) order[d] = static_cast<std::int64_t>(d);
    if (dense(order)) return true;
    std::swap(order[order.size() - 1], order[order.size() - 2]);
    return dense(order);
  }

  // An operand matmul would copy is made contiguous first, in the open: the forward does the same
  // copy it did inside matmul, and the backward reads the copy instead of making it again (as
  // eager's autograd saves it).
  void make_foldable(ir::Node& node, const char* operand, std::vector<ir::Node>& nodes) {
    auto arg = std::find_if(node.args.begin(), node.args.end(), [&](const ir::Argument& a) { return a.name == operand; });
    const int id = std::get<ir::ValueRef>(arg->value).id;
    const auto& type = graph_.value(id).type;
    if (folds(type)) return;
    auto laid_out = type;
    std::int64_t stride = 1;
    for (std::size_t d = laid_out.sizes.size(); d-- > 0;) {
      laid_out.strides[d] = stride;
      stride *= laid_out.sizes[d];
    }
    ir::Node contiguous;
    contiguous.op = "aten::contiguous";
    contiguous.args = {{"self", ir::ValueRef{id}}, {"memory_format", std::int64_t{0}}};  // contiguous_format
    contiguous.outputs = {graph_.add_value(laid_out, ir::ValueRole::Intermediate)};
    arg->value = ir::ValueRef{contiguous.outputs[0]};
    nodes.push_back(std::move(contiguous));
  }

  ir::Graph& graph_;
  std::vector<int> provisional_;
  int attention_kernels_ = 0;
};

}  // namespace

TrainingRewrite rewrite_for_training(ir::Graph& graph) { return Rewriter(graph).run(); }

}  // namespace zenith::autodiff
