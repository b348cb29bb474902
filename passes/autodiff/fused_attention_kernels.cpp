#include "passes/autodiff/fused_attention_kernels.h"

#include <cmath>
#include <cstdint>
#include <optional>

#include <ATen/ATen.h>
#include <ATen/SDPBackend.h>

#include "core/node_arguments.h"

namespace zenith::autodiff {
namespace {

using ir::copy_arg;

// An uninitialized tensor of the recorded type: all _fused_sdp_choice reads of a tensor is its
// metadata.
at::Tensor probe(const ir::TensorType& type, bool requires_grad) {
  auto tensor = at::empty_strided(type.sizes, type.strides, at::TensorOptions().dtype(type.dtype).device(type.device));
  return requires_grad ? tensor.requires_grad_() : tensor;
}

// The memory-efficient kernel reads the mask's rows as they lie only where every stride but the
// last is a multiple of 8 and the last is 1 (ATen's aligned_tensor<8>); elsewhere eager pads it.
bool aligned_for_efficient(const ir::TensorType& mask) {
  if (mask.rank() < 1 || mask.strides.back() != 1) return false;
  for (std::size_t d = 0; d + 1 < mask.strides.size(); ++d) {
    if (mask.strides[d] % 8 != 0) return false;
  }
  return true;
}

ir::TensorType placeholder(const c10::Device& device) {
  ir::TensorType type;
  type.sizes = {0};
  type.strides = {1};
  type.device = device;
  return type;
}

// The mask expanded to the scores' [B, H, T, S] (strides 0 where it broadcasts), as ATen hands it
// to the memory-efficient kernel; its result typed by the caller's run, as the kernel's are.
ir::Node expanded_mask(int mask, const std::vector<std::int64_t>& scores, int result) {
  ir::Node expand;
  expand.op = "aten::expand";
  expand.args = {{"self", ir::ValueRef{mask}}, {"size", scores}, {"implicit", false}};
  expand.outputs = {result};
  return expand;
}

}  // namespace

const char* attention_kernel_name(AttentionKernel kernel) {
  switch (kernel) {
    case AttentionKernel::Flash: return "flash";
    case AttentionKernel::Efficient: return "efficient";
    case AttentionKernel::Cudnn: return "cudnn";
    case AttentionKernel::None: return "none";
  }
  return "none";
}

AttentionKernel eager_attention_kernel(const ir::Graph& graph, const ir::Node& node) {
  if (node.op != "aten::scaled_dot_product_attention" || node.outputs.size() != 1) return AttentionKernel::None;
  const int q = ir::tensor_arg(node, "query"), k = ir::tensor_arg(node, "key"), v = ir::tensor_arg(node, "value");
  const int mask = ir::tensor_arg(node, "attn_mask");
  if (q < 0 || k < 0 || v < 0 || ir::flag_arg(node, "enable_gqa")) return AttentionKernel::None;
  const auto &qt = graph.value(q).type, &kt = graph.value(k).type, &vt = graph.value(v).type;
  if (!qt.device.is_cuda() || qt.rank() != 4 || kt.rank() != 4 || vt.rank() != 4) return AttentionKernel::None;
  if (mask >= 0 && graph.value(mask).type.dtype != qt.dtype) return AttentionKernel::None;  // boolean
  const auto* scale_arg = node.arg("scale");
  if (scale_arg == nullptr) return AttentionKernel::None;
  const auto scale = ir::number_arg(node, "scale");
  std::int64_t choice = static_cast<std::int64_t>(at::SDPBackend::error);
  try {
    const std::optional<at::Tensor> mask_probe =
        mask >= 0 ? std::optional<at::Tensor>(probe(graph.value(mask).type, false)) : std::nullopt;
    choice = at::_fused_sdp_choice(probe(qt, qt.requires_grad), probe(kt, kt.requires_grad),
                                   probe(vt, vt.requires_grad), mask_probe,
                                   ir::number_arg(node, "dropout_p").value_or(0.0), ir::flag_arg(node, "is_causal"),
                                   scale);
  } catch (const std::exception&) {
    return AttentionKernel::None;  // inputs eager would refuse too: its own error comes from the node as it is
  }
  switch (static_cast<at::SDPBackend>(choice)) {
    case at::SDPBackend::flash_attention:
      // Eager pads head sizes to a multiple of 8 for this kernel and slices its result.
      return qt.sizes[3] % 8 == 0 && kt.sizes[3] % 8 == 0 && vt.sizes[3] % 8 == 0 ? AttentionKernel::Flash
                                                                                 : AttentionKernel::None;
    case at::SDPBackend::efficient_attention:
      return mask < 0 || aligned_for_efficient(graph.value(mask).type) ? AttentionKernel::Efficient
                                                                       : AttentionKernel::None;
    case at::SDPBackend::cudnn_attention:
      return mask < 0 || !graph.value(mask).type.requires_grad ? AttentionKernel::Cudnn : AttentionKernel::None;
    default:
      return AttentionKernel::None;
  }
}

std::vector<ir::Node> fused_attention_nodes(ir::Graph& graph, const ir::Node& node, AttentionKernel kernel,
                                            const std::function<int(const ir::TensorType&)>& provisional) {
  const int q = ir::tensor_arg(node, "query"), k = ir::tensor_arg(node, "key");
  const int mask = ir::tensor_arg(node, "attn_mask");
  const auto& qt = graph.value(q).type;
  std::vector<ir::Node> nodes;
  ir::Node fused;
  fused.args = {copy_arg(node, "query"), copy_arg(node, "key"), copy_arg(node, "value")};
  int results = 0;
  switch (kernel) {
    case AttentionKernel::Efficient: {
      int bias = -1;
      if (mask >= 0) {
        const std::vector<std::int64_t> scores = {qt.sizes[0], qt.sizes[1], qt.sizes[2], graph.value(k).type.sizes[2]};
        nodes.push_back(expanded_mask(mask, scores, provisional(placeholder(qt.device))));
        bias = nodes.back().outputs[0];
      }
      fused.op = "aten::_scaled_dot_product_efficient_attention";
      // Built in place, as the cuDNN case's: g++ 13 took an ArgValue assigned after its
      // construction for a variant copied uninitialized (nine -Wmaybe-uninitialized warnings).
      fused.args.push_back({"attn_bias", bias >= 0 ? ir::ArgValue{ir::ValueRef{bias}} : ir::ArgValue{ir::NoneArg{}}});
      fused.args.push_back({"compute_log_sumexp", true});
      fused.args.push_back(copy_arg(node, "dropout_p"));
      fused.args.push_back(copy_arg(node, "is_causal"));
      fused.args.push_back(copy_arg(node, "scale"));
      results = 4;  // output, log-sum-exp, seed, offset
      break;
    }
    case AttentionKernel::Cudnn:
      fused.op = "aten::_scaled_dot_product_cudnn_attention";
      fused.args.push_back({"attn_bias", mask >= 0 ? ir::ArgValue{ir::ValueRef{mask}} : ir::ArgValue{ir::NoneArg{}}});
      fused.args.push_back({"compute_log_sumexp", true});
      fused.args.push_back(copy_arg(node, "dropout_p"));
      fused.args.push_back(copy_arg(node, "is_causal"));
      fused.args.push_back({"return_debug_mask", false});
      fused.args.push_back(copy_arg(node, "scale"));
      results = 9;  // output, log-sum-exp, sequence offsets and lengths, seed, offset, debug mask
      break;
    case AttentionKernel::Flash: {
      // Eager passes the scale it computed from the head size, never None.
      const double scale = ir::number_arg(node, "scale").value_or(1.0 / std::sqrt(static_cast<double>(qt.sizes[3])));
      fused.op = "aten::_scaled_dot_product_flash_attention";
      fused.args.push_back(copy_arg(node, "dropout_p"));
      fused.args.push_back(copy_arg(node, "is_causal"));
      fused.args.push_back({"return_debug_mask", false});
      fused.args.push_back({"scale", scale});
      results = 9;  // output, log-sum-exp, sequence offsets and lengths, random-number state, debug mask
      break;
    }
    case AttentionKernel::None:
      return {node};
  }
  fused.outputs = {node.outputs.at(0)};
  for (int r = 1; r < results; ++r) fused.outputs.push_back(provisional(placeholder(qt.device)));
  nodes.push_back(std::move(fused));
  return nodes;
}

}  // namespace zenith::autodiff
