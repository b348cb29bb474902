#include "capture/inference_layout.h"

#include <fmt/format.h>

#include "capture/backward_capture.h"
#include "core/exception_message.h"
#include "passes/channels_last_convolutions.h"

namespace zenith::capture {
namespace {

// The rewrite copies every convolution's input, not knowing yet which ones the run would find
// channels-last already (a convolution after another): ATen returns those themselves.
void drop_copies_of_channels_last_values(ir::Graph& graph) {
  std::vector<ir::Node> kept;
  kept.reserve(graph.nodes.size());
  for (auto& node : graph.nodes) {
    if (node.op == "aten::contiguous") {
      const int input = std::get<ir::ValueRef>(node.arg("self")->value).id;
      if (graph.value(input).type == graph.value(node.outputs[0]).type) {
        graph.replace_uses(node.outputs[0], input);
        continue;
      }
    }
    kept.push_back(std::move(node));
  }
  graph.nodes = std::move(kept);
  graph.remove_unused_values();
}

}  // namespace

bool channels_last_for_inference(ir::Graph& graph, const std::vector<at::Tensor>& inputs, std::string& why,
                                 bool cuda_only, double kept_fraction) {
  why.clear();
  auto relaid = graph;
  if (!passes::convolutions_channels_last(relaid, /*training=*/false, cuda_only, kept_fraction)) return false;
  std::vector<std::vector<std::int64_t>> strides;
  try {
    strides = forward_strides(relaid, inputs);
  } catch (const std::exception& error) {
    why = "the forward failed channels-last: " + message_of(error);
    return false;
  }
  for (std::size_t id = 0; id < strides.size(); ++id) {
    if (!strides[id].empty() && relaid.values[id]) relaid.values[id]->type.strides = strides[id];
  }
  // The caller gets every result laid out as eager lays it out.
  for (int id : relaid.outputs) {
    if (relaid.value(id).type.strides != graph.value(id).type.strides) {
      why = fmt::format("result %{} would be laid out as {} instead of eager's {}", id,
                        relaid.value(id).type.to_string(), graph.value(id).type.to_string());
      return false;
    }
  }
  drop_copies_of_channels_last_values(relaid);
  graph = std::move(relaid);
  return true;
}

}  // namespace zenith::capture
