#include "capture/promoting_writes.h"

#include <algorithm>
#include <set>

#include <ATen/ATen.h>

#include "core/op_schema.h"
#include "core/node_arguments.h"

namespace zenith::capture {
namespace {

const std::set<std::string> kArithmetic = {"aten::add_", "aten::sub_", "aten::mul_", "aten::div_"};

at::Tensor meta_of(const ir::TensorType& type) {
  return at::empty_strided(type.sizes, type.strides, at::TensorOptions().dtype(type.dtype).device(c10::kMeta));
}

}  // namespace

int functionalize_promoting_writes(ir::Graph& graph) {
  const auto producers = graph.producers();
  const auto consumers = graph.consumers();
  const std::set<int> returned(graph.outputs.begin(), graph.outputs.end());
  std::vector<ir::Node> nodes;
  nodes.reserve(graph.nodes.size());
  int rewritten = 0;
  for (std::size_t n = 0; n < graph.nodes.size(); ++n) {
    const auto& node = graph.nodes[n];  // copied, not moved: later nodes ask about earlier ones
    const int self = ir::tensor_arg(node, "self"), other = ir::tensor_arg(node, "other");
    const bool candidate = kArithmetic.count(node.op) && node.overload == "Tensor" && node.outputs.size() == 1 &&
                           self >= 0 && other >= 0 && graph.value(self).type.dtype != graph.value(other).type.dtype;
    if (!candidate) {
      nodes.push_back(node);
      continue;
    }
    const int producer = producers[static_cast<std::size_t>(self)];
    const auto& readers = consumers[static_cast<std::size_t>(self)];
    const auto made = producer >= 0 ? ir::alias_facts(graph.nodes[static_cast<std::size_t>(producer)]) : ir::AliasFacts{};
    const bool private_write =
        producer >= 0 && !made.is_view && made.mutated_inputs.empty() &&
        !returned.count(self) &&
        std::all_of(readers.begin(), readers.end(), [&](int reader) { return static_cast<std::size_t>(reader) <= n; });
    const auto& written = graph.value(self).type;
    const auto promoted = at::result_type(meta_of(written), meta_of(graph.value(other).type));
    if (!private_write) {
      nodes.push_back(node);
      continue;
    }
    ir::Node functional = node;
    functional.op = node.op.substr(0, node.op.size() - 1);  // aten::add_ -> aten::add
    ++rewritten;
    if (promoted == written.dtype) {  // a 0-dim float64 divisor of float32 scores: no cast needed
      nodes.push_back(std::move(functional));
      continue;
    }
    auto wide = written;
    wide.dtype = promoted;
    wide.requires_grad = graph.value(node.outputs[0]).type.requires_grad;
    functional.outputs = {graph.add_value(wide, ir::ValueRole::Intermediate)};
    auto cast = ir::plain_cast(functional.outputs[0], written.dtype);
    cast.outputs = node.outputs;
    nodes.push_back(std::move(functional));
    nodes.push_back(std::move(cast));
  }
  graph.nodes = std::move(nodes);
  return rewritten;
}

}  // namespace zenith::capture
