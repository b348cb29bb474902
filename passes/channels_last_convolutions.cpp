#include "passes/channels_last_convolutions.h"

#include <algorithm>
#include <map>
#include <vector>

#include <c10/core/MemoryFormat.h>

namespace zenith::passes {
namespace {

bool is_conv2d(const ir::Graph& graph, const ir::Node& node, bool cuda_only) {
  if (node.op != "aten::_convolution") return false;
  const auto* transposed = node.arg("transposed");
  if (transposed == nullptr || std::get_if<bool>(&transposed->value) == nullptr || *std::get_if<bool>(&transposed->value)) {
    return false;
  }
  for (const char* operand : {"input", "weight"}) {
    const auto* arg = node.arg(operand);
    const auto* ref = arg ? std::get_if<ir::ValueRef>(&arg->value) : nullptr;
    if (ref == nullptr) return false;
    const auto& type = graph.value(ref->id).type;
    const bool floating = type.dtype == c10::kFloat || type.dtype == c10::kHalf || type.dtype == c10::kBFloat16;
    if (type.rank() != 4 || (cuda_only && !type.device.is_cuda()) || !floating) return false;
  }
  return true;
}

// Batch norm in eval mode: its CUDA backward on channels-last tensors asks for batch statistics an
// eval forward does not make.
bool is_eval_batch_norm(const ir::Node& node) {
  if (node.op != "aten::batch_norm") return false;
  const auto* training = node.arg("training");
  const auto* flag = training ? std::get_if<bool>(&training->value) : nullptr;
  return flag == nullptr || !*flag;
}

bool is_channels_last(const ir::TensorType& type) {
  return type.strides == c10::get_channels_last_strides_2d(c10::IntArrayRef(type.sizes));
}

// A float32 depthwise convolution (a group per input channel) keeps the layout eager gives its
// input: ATen runs it on NCHW tensors with its own kernel in float32, and on channels-last ones
// with cuDNN, which computes in TF32 where the flags allow (the traced `allow_tf32` is true by
// default). Moved, ConvNeXt-Tiny's float32 logits differed from eager's by 1.7e-3 of the largest
// on an H100, against 4.5e-5 kept (2026-11-27).
bool keeps_eager_layout(const ir::Graph& graph, const ir::Node& node) {
  const auto* groups = node.arg("groups");
  const auto* count = groups ? std::get_if<std::int64_t>(&groups->value) : nullptr;
  const auto& input = graph.value(std::get<ir::ValueRef>(node.arg("input")->value).id).type;
  return input.dtype == c10::kFloat && count != nullptr && *count > 1 && *count == input.sizes[1];
}

// The node copying `id` into `format` (a no-op at run time when it is laid out so already).
ir::Node layout_copy(ir::Graph& graph, int id, c10::MemoryFormat format) {
  auto type = graph.value(id).type;
  if (format == c10::MemoryFormat::ChannelsLast) {
    type.strides = c10::get_channels_last_strides_2d(c10::IntArrayRef(type.sizes));
  }
  ir::Node contiguous;
  contiguous.op = "aten::contiguous";
  contiguous.args = {{"self", ir::ValueRef{id}}, {"memory_format", static_cast<std::int64_t>(format)}};
  contiguous.outputs = {graph.add_value(type, ir::ValueRole::Intermediate)};
  return contiguous;
}

}  // namespace

bool convolutions_channels_last(ir::Graph& graph, bool training, bool cuda_only) {
  for (int id : graph.outputs) {
    if (graph.value(id).type.rank() == 4) return false;
  }
  bool any = false;
  for (const auto& node : graph.nodes) {
    if (training && is_eval_batch_norm(node)) return false;
    any = any || (is_conv2d(graph, node, cuda_only) && !keeps_eager_layout(graph, node));
  }
  if (!any) return false;
  std::map<int, int> copy_of;  // value -> its channels-last copy
  std::vector<ir::Node> nodes;
  nodes.reserve(graph.nodes.size());
  for (auto& node : graph.nodes) {
    if (is_conv2d(graph, node, cuda_only) && keeps_eager_layout(graph, node)) {
      // Layouts upstream may change: the input is pinned to the one eager gives it (the weight, a
      // parameter, keeps its own).
      auto& input = *std::find_if(node.args.begin(), node.args.end(), [](const ir::Argument& a) { return a.name == "input"; });
      const int id = std::get<ir::ValueRef>(input.value).id;
      auto pin = layout_copy(graph, id, is_channels_last(graph.value(id).type) ? c10::MemoryFormat::ChannelsLast
                                                                               : c10::MemoryFormat::Contiguous);
      input.value = ir::ValueRef{pin.outputs[0]};
      nodes.push_back(std::move(pin));
    } else if (is_conv2d(graph, node, cuda_only)) {
      for (auto& arg : node.args) {
        if (arg.name != "input" && arg.name != "weight") continue;
        const int id = std::get<ir::ValueRef>(arg.value).id;
        if (is_channels_last(graph.value(id).type)) continue;
        auto found = copy_of.find(id);
        if (found == copy_of.end()) {
          auto copy = layout_copy(graph, id, c10::MemoryFormat::ChannelsLast);
          found = copy_of.emplace(id, copy.outputs[0]).first;
          nodes.push_back(std::move(copy));
        }
        arg.value = ir::ValueRef{found->second};
      }
    }
    nodes.push_back(std::move(node));
  }
  graph.nodes = std::move(nodes);
  return true;
}

}  // namespace zenith::passes
