#include "passes/meta_values.h"

#include <algorithm>
#include <stdexcept>

#include <ATen/ATen.h>

#include "core/aten_call.h"

namespace zenith::passes {

std::vector<at::Tensor> MetaValues::run(const ir::Node& node) {
  return ir::AtenCall(node).run([&](int id) -> const at::Tensor& { return tensor(id); });
}

const at::Tensor& MetaValues::tensor(int id) {
  auto it = tensors_.find(id);
  if (it != tensors_.end()) return it->second;
  const auto& type = graph_.value(id).type;
  auto tensor = at::empty_strided(type.sizes, type.strides, at::TensorOptions().dtype(type.dtype).device(c10::kMeta));
  return tensors_.emplace(id, std::move(tensor)).first->second;
}

int type_result(ir::Graph& graph, MetaValues& meta, ir::Node& node, int output) {
  const auto device = graph.value(node.input_ids().at(0)).type.device;
  node.outputs = {-1};  // one result, as the call expects
  auto result = meta.run(node).at(0);
  auto type = type_of(result);
  type.device = device;
  if (output < 0) {
    output = graph.add_value(type, ir::ValueRole::Intermediate);
  } else {
    const auto& old = graph.value(output).type;
    if (old.dtype != type.dtype || old.sizes != type.sizes) {
      throw std::runtime_error(node.op + " would change the dtype or sizes of the value it replaces");
    }
    graph.value(output).type = type;
  }
  node.outputs = {output};
  meta.set(output, result);
  return output;
}

bool retype_readers(ir::Graph& graph, std::set<int> changed, std::size_t from) {
  MetaValues meta(graph);
  for (std::size_t n = from; n < graph.nodes.size(); ++n) {
    auto& node = graph.nodes[n];
    const auto inputs = node.input_ids();
    if (std::none_of(inputs.begin(), inputs.end(), [&](int id) { return changed.count(id) > 0; })) continue;
    // A fused attention's result keeps the layout its type says (attention fusion gives it the
    // fused kernels' layout; the executor lays out what a backend hands back as the type says),
    // whatever the layout of what it reads. Its meta kernel could not say otherwise: ATen has
    // none for the math path's masked form.
    if (node.op == "aten::scaled_dot_product_attention") continue;
    std::vector<at::Tensor> outputs;
    try {
      outputs = meta.run(node);
    } catch (const std::exception&) {
      return false;
    }
    for (std::size_t o = 0; o < node.outputs.size(); ++o) {
      auto& old = graph.value(node.outputs[o]).type;
      auto fresh = type_of(outputs[o]);
      if (fresh.dtype != old.dtype || fresh.sizes != old.sizes) return false;
      if (fresh.strides != old.strides) {
        old.strides = fresh.strides;
        changed.insert(node.outputs[o]);
      }
      meta.set(node.outputs[o], outputs[o]);
    }
  }
  return std::none_of(graph.outputs.begin(), graph.outputs.end(), [&](int id) { return changed.count(id) > 0; });
}

}  // namespace zenith::passes
