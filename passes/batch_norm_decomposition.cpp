#include "passes/batch_norm_decomposition.h"

#include <optional>

#include "core/node_arguments.h"
#include "core/tensor_type.h"
#include "passes/meta_values.h"

namespace zenith::passes {
namespace {

// Builds one batch norm's replacement. New values are typed by running each new op on meta
// tensors of the exact input types: ATen decides the result's dtype and layout, as it will at run
// time.
class Decomposition {
 public:
  Decomposition(ir::Graph& graph, const ir::Node& norm) : graph_(graph), norm_(norm), meta_(graph) {}

  // The nodes computing the same value into the batch norm's own output, or nullopt when the
  // arithmetic would not give exactly its type (mixed dtypes promote, for one).
  std::optional<std::vector<ir::Node>> build() {
    const int input = ir::tensor_arg(norm_, "input");
    const auto& type = graph_.value(input).type;
    if (type.rank() < 2) return std::nullopt;
    const std::int64_t channels = type.sizes[1];
    // [C] -> [C, 1, ...]: per channel, broadcast over the dimensions after it.
    std::vector<std::int64_t> per_channel(static_cast<std::size_t>(type.rank() - 1), 1);
    per_channel[0] = channels;
    auto channel_view = [&](const char* name) -> std::optional<int> {
      const int id = ir::tensor_arg(norm_, name);
      if (id < 0) return std::nullopt;
      const auto& sizes = graph_.value(id).type.sizes;
      if (sizes != std::vector<std::int64_t>{channels}) throw Refused{};
      if (per_channel.size() == 1) return id;
      return emit("aten::view", "", {{"self", ir::ValueRef{id}}, {"size", per_channel}});
    };
    try {
      const auto mean = channel_view("running_mean");
      const auto var = channel_view("running_var");
      const auto weight = channel_view("weight");
      const auto bias = channel_view("bias");
      const double eps = std::get<double>(norm_.arg("eps")->value);
      // (x - mean) first, as ATen does: with x close to a large mean, x * a + (bias - mean * a)
      // would cancel and lose the digits the subtraction keeps (measured on calibrated
      // torchvision models: 1e-3 relative differences from eager in float32). Emitted first, it
      // roots the fusion group at x; the per-channel scale's group joins it (passes/fusion.h).
      const int centered = emit("aten::sub", "Tensor", {{"self", ir::ValueRef{input}}, {"other", ir::ValueRef{*mean}}, {"alpha", std::int64_t{1}}});
      const int shifted = emit("aten::add", "Scalar", {{"self", ir::ValueRef{*var}}, {"other", eps}, {"alpha", std::int64_t{1}}});
      int scale = emit("aten::rsqrt", "", {{"self", ir::ValueRef{shifted}}});
      if (weight) scale = emit("aten::mul", "Tensor", {{"self", ir::ValueRef{scale}}, {"other", ir::ValueRef{*weight}}});
      const int out = norm_.outputs.front();
      if (bias) {
        const int scaled = emit("aten::mul", "Tensor", {{"self", ir::ValueRef{centered}}, {"other", ir::ValueRef{scale}}});
        emit("aten::add", "Tensor", {{"self", ir::ValueRef{scaled}}, {"other", ir::ValueRef{*bias}}, {"alpha", std::int64_t{1}}}, out);
      } else {
        emit("aten::mul", "Tensor", {{"self", ir::ValueRef{centered}}, {"other", ir::ValueRef{scale}}}, out);
      }
    } catch (const Refused&) {
      return std::nullopt;
    }
    return std::move(nodes_);
  }

 private:
  struct Refused {};

  // Appends `op` and returns its result's id: a new value, or `output` when given, whose type the
  // result must then match exactly.
  int emit(const char* op, const char* overload, std::vector<ir::Argument> args, int output = -1) {
    ir::Node node;
    node.op = op;
    node.overload = overload;
    node.args = std::move(args);
    node.outputs = {-1};  // AtenCall checks the count of results; the id comes below
    auto result = meta_.run(node).at(0);
    auto type = type_of(result);
    type.device = graph_.value(ir::tensor_arg(norm_, "input")).type.device;
    if (output >= 0) {
      const auto& want = graph_.value(output).type;
      if (type.dtype != want.dtype || type.sizes != want.sizes || type.strides != want.strides) throw Refused{};
    } else {
      output = graph_.add_value(type, ir::ValueRole::Intermediate);
    }
    node.outputs = {output};
    meta_.set(output, result);
    nodes_.push_back(std::move(node));
    return output;
  }

  ir::Graph& graph_;
  const ir::Node& norm_;
  std::vector<ir::Node> nodes_;
  MetaValues meta_;
};

}  // namespace

void BatchNormDecomposition::run(ir::Graph& graph, PassReport& report) {
  std::vector<ir::Node> nodes;
  nodes.reserve(graph.nodes.size());
  std::int64_t decomposed = 0;
  for (auto& node : graph.nodes) {
    std::optional<std::vector<ir::Node>> replacement;
    if (ir::is_inference_batch_norm(node) &&
        (!cuda_only_ || graph.value(ir::tensor_arg(node, "input")).type.device.is_cuda())) {
      replacement = Decomposition(graph, node).build();
    }
    if (!replacement) {
      nodes.push_back(std::move(node));
      continue;
    }
    for (auto& part : *replacement) nodes.push_back(std::move(part));
    ++decomposed;
  }
  graph.nodes = std::move(nodes);
  // A refused decomposition leaves values behind.
  graph.remove_unused_values();
  report.counters["decomposed"] = decomposed;
}

}  // namespace zenith::passes
