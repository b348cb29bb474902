#include "capture/autocast_inner_casts.h"

#include <exception>
#include <vector>

#include <ATen/ATen.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <fmt/format.h>

#include "core/tensor_type.h"
#include "passes/cross_entropy_steps.h"
#include "passes/meta_values.h"

namespace zenith::capture {
namespace {

// A new value typed as the meta run of `node` gives it, on the device of `like`.
int add_result(ir::Graph& graph, passes::MetaValues& meta, const ir::Node& node, int like) {
  ir::Node probe = node;
  probe.outputs = {like};  // one result, whose id the meta run does not read
  auto type = type_of(meta.run(probe).at(0));
  type.device = graph.value(like).type.device;
  type.requires_grad = graph.value(like).type.requires_grad;
  return graph.add_value(type, ir::ValueRole::Intermediate);
}

std::string dtypes_read(const ir::Graph& graph, const ir::Node& node) {
  std::string read;
  for (int id : node.input_ids()) read += (read.empty() ? "" : ", ") + ir::dtype_name(graph.value(id).type.dtype);
  return read;
}

// "" when the op gives each recorded result's dtype on the recorded inputs without autocast, or
// when the meta device cannot tell; else what differs.
std::string dtype_difference(const ir::Graph& graph, passes::MetaValues& meta, const ir::Node& node) {
  if (node.input_ids().empty()) return "";  // made from constants alone: nothing for autocast to cast
  std::vector<at::Tensor> results;
  try {
    results = meta.run(node);
  } catch (const std::exception&) {
    return "";
  }
  for (std::size_t r = 0; r < results.size() && r < node.outputs.size(); ++r) {
    const auto recorded = graph.value(node.outputs[r]).type.dtype;
    if (!results[r].defined() || results[r].scalar_type() == recorded) continue;
    return fmt::format("{} read {} and returned {} inside the autocast region, but gives {} on those inputs without "
                       "autocast: autocast cast inside it, where the trace cannot see",
                       node.op, dtypes_read(graph, node), ir::dtype_name(recorded),
                       ir::dtype_name(results[r].scalar_type()));
  }
  return "";
}

}  // namespace

std::string make_autocast_inner_casts_explicit(ir::Graph& graph) {
  // The question is what each op gives on its own, as the plan runs it.
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  passes::MetaValues meta(graph);
  std::vector<ir::Node> nodes;
  nodes.reserve(graph.nodes.size());
  std::string unfit;
  for (std::size_t n = 0; n < graph.nodes.size(); ++n) {
    const auto& node = graph.nodes[n];
    const auto difference = dtype_difference(graph, meta, node);
    if (!difference.empty() && passes::splits_into_cross_entropy_steps(graph, node)) {
      // ATen's two steps with autocast's cast between them in the open: the log-probabilities in the
      // logits' dtype, cast to the loss's dtype (what autocast's nll_loss did), the loss.
      const auto loss_dtype = graph.value(node.outputs[0]).type.dtype;
      for (auto& step : passes::cross_entropy_steps(graph, node, loss_dtype, [&](const ir::Node& step, int logits) {
             return add_result(graph, meta, step, logits);
           })) {
        nodes.push_back(std::move(step));
      }
      continue;
    }
    if (!difference.empty() && unfit.empty()) unfit = difference;
    nodes.push_back(node);
  }
  graph.nodes = std::move(nodes);
  return unfit;
}

}  // namespace zenith::capture
