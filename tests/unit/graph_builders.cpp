#include "graph_builders.h"

#include <ATen/CPUGeneratorImpl.h>

#include "runtime/signature.h"
#include "core/aten_call.h"
#include "core/verifier.h"

namespace zenith::testing {

GraphBuilder::GraphBuilder() : generator_(at::make_generator<at::CPUGeneratorImpl>(/*seed_in=*/20240601)) {}

int GraphBuilder::input(std::vector<std::int64_t> sizes, c10::ScalarType dtype) {
  auto example = at::isFloatingType(dtype)      ? at::randn(sizes, generator_, at::TensorOptions().dtype(dtype))
                 : dtype == c10::ScalarType::Bool ? at::randn(sizes, generator_) > 0
                                                  : at::randint(0, 4, sizes, generator_, at::TensorOptions().dtype(dtype));
  int id = graph_.add_value(type_of(example), ir::ValueRole::Input, "x" + std::to_string(graph_.inputs.size()));
  graph_.inputs.push_back(id);
  examples_.resize(graph_.values.size());
  examples_[id] = example;
  return id;
}

int GraphBuilder::parameter(std::vector<std::int64_t> sizes, const std::string& name) {
  auto example = at::randn(sizes, generator_);
  int id = graph_.add_value(type_of(example), ir::ValueRole::Parameter, name);
  graph_.inputs.push_back(id);
  examples_.resize(graph_.values.size());
  examples_[id] = example;
  return id;
}

int GraphBuilder::constant(const at::Tensor& value) {
  int id = graph_.add_value(type_of(value), ir::ValueRole::Constant);
  graph_.constants[id] = value;
  examples_.resize(graph_.values.size());
  examples_[id] = value;
  return id;
}

std::vector<int> GraphBuilder::apply(const std::string& op, const std::string& overload, std::vector<ir::Argument> args,
                                     int list_length) {
  auto handle = c10::Dispatcher::singleton().findSchemaOrThrow(op.c_str(), overload.c_str());
  const auto& returns = handle.schema().returns();
  ir::Node node{op, overload, std::move(args), {}, false};
  node.list_output = returns.size() == 1 && returns[0].type()->kind() == c10::TypeKind::ListType;
  std::size_t count = node.list_output ? static_cast<std::size_t>(list_length) : returns.size();
  node.outputs.assign(count, -1);
  auto results = ir::AtenCall(node).run([&](int id) -> const at::Tensor& { return examples_.at(id); });
  for (std::size_t r = 0; r < results.size(); ++r) {
    node.outputs[r] = graph_.add_value(type_of(results[r]), ir::ValueRole::Intermediate);
    examples_.resize(graph_.values.size());
    examples_[node.outputs[r]] = results[r];
  }
  graph_.nodes.push_back(node);
  return node.outputs;
}

int GraphBuilder::op(const std::string& op, const std::string& overload, std::vector<ir::Argument> args) {
  return apply(op, overload, std::move(args)).at(0);
}

ir::Graph GraphBuilder::finish(std::vector<int> outputs) {
  graph_.outputs = outputs;
  if (outputs.size() == 1) {
    graph_.output_structure = ir::OutputStructure{};
  } else {
    graph_.output_structure.kind = ir::OutputStructure::Kind::Tuple;
    for (std::size_t i = 0; i < outputs.size(); ++i) {
      graph_.output_structure.elements.emplace_back().index = static_cast<int>(i);  // Kind::Tensor
    }
  }
  ir::verify(graph_);
  return graph_;
}

std::vector<at::Tensor> GraphBuilder::example_inputs() const {
  std::vector<at::Tensor> inputs;
  for (int id : graph_.inputs) inputs.push_back(examples_.at(id));
  return inputs;
}

ir::Argument value(const std::string& name, int id) { return {name, ir::ValueRef{id}}; }
ir::Argument scalar(const std::string& name, std::int64_t v) { return {name, v}; }
ir::Argument real(const std::string& name, double v) { return {name, v}; }
ir::Argument ints(const std::string& name, std::vector<std::int64_t> v) { return {name, std::move(v)}; }
ir::Argument none(const std::string& name) { return {name, ir::NoneArg{}}; }

int cast(GraphBuilder& b, int x, c10::ScalarType dtype) {
  return b.op("aten::to", "dtype",
              {value("self", x), scalar("dtype", static_cast<std::int64_t>(dtype)), {"non_blocking", false},
               {"copy", false}, none("memory_format")});
}

ir::Graph elementwise_chain() {
  GraphBuilder b;
  int x = b.input({4, 8});
  int r = b.op("aten::relu", "", {value("self", x)});
  int m = b.op("aten::mul", "Tensor", {value("self", r), value("other", x)});
  int a = b.op("aten::add", "Tensor", {value("self", m), value("other", r), scalar("alpha", 1)});
  return b.finish({a});
}

int count_nodes(const ir::Graph& g, const std::string& op) {
  int n = 0;
  for (const auto& node : g.nodes) n += node.op == op;
  return n;
}

}  // namespace zenith::testing
