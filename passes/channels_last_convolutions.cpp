#include "passes/channels_last_convolutions.h"

#include <map>
#include <vector>

#include <c10/core/MemoryFormat.h>

#include "passes/kept_weight_copies.h"

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

}  // namespace

bool convolutions_channels_last(ir::Graph& graph, bool training, bool cuda_only, double kept_fraction) {
  for (int id : graph.outputs) {
    if (graph.value(id).type.rank() == 4) return false;
  }
  bool any = false;
  for (const auto& node : graph.nodes) {
    if (training && is_eval_batch_norm(node)) return false;
    any = any || is_conv2d(graph, node, cuda_only);
  }
  if (!any) return false;
  std::map<int, int> copy_of;  // value -> its channels-last copy
  std::vector<ir::Node> nodes;
  nodes.reserve(graph.nodes.size());
  for (auto& node : graph.nodes) {
    if (is_conv2d(graph, node, cuda_only)) {
      for (auto& arg : node.args) {
        if (arg.name != "input" && arg.name != "weight") continue;
        const int id = std::get<ir::ValueRef>(arg.value).id;
        if (is_channels_last(graph.value(id).type)) continue;
        if (!training && arg.name == "weight" &&
            !weight_copy_kept(graph.value(id).type, graph.value(node.outputs.front()).type, kept_fraction)) {
          continue;
        }
        auto found = copy_of.find(id);
        if (found == copy_of.end()) {
          auto type = graph.value(id).type;
          type.strides = c10::get_channels_last_strides_2d(c10::IntArrayRef(type.sizes));
          ir::Node contiguous;
          contiguous.op = "aten::contiguous";
          contiguous.args = {{"self", ir::ValueRef{id}},
                             {"memory_format", static_cast<std::int64_t>(c10::MemoryFormat::ChannelsLast)}};
          contiguous.outputs = {graph.add_value(type, ir::ValueRole::Intermediate)};
          found = copy_of.emplace(id, contiguous.outputs[0]).first;
          nodes.push_back(std::move(contiguous));
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
