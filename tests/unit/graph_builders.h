// Building IR graphs by hand in tests. Output types are found by running each op eagerly on
// random example tensors, so hand-built graphs are always well typed. The examples come from the
// builder's own seeded generator: the same graph gets the same examples in every test and run.
#pragma once

#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "core/graph.h"

namespace zenith::testing {

class GraphBuilder {
 public:
  GraphBuilder();
  /// A call input of the given sizes (contiguous) and dtype.
  int input(std::vector<std::int64_t> sizes, c10::ScalarType dtype = at::kFloat);
  /// A parameter input.
  int parameter(std::vector<std::int64_t> sizes, const std::string& name);
  /// A tensor constant.
  int constant(const at::Tensor& value);
  /// Applies `op` ("aten::add", overload "Tensor") to arguments; returns its output ids. An op
  /// returning Tensor[] needs the list's length.
  std::vector<int> apply(const std::string& op, const std::string& overload, std::vector<ir::Argument> args,
                         int list_length = 0);
  /// As apply, for one output.
  int op(const std::string& op, const std::string& overload, std::vector<ir::Argument> args);
  /// Marks outputs (a tuple when there are several) and returns the graph.
  ir::Graph finish(std::vector<int> outputs);
  /// The example tensors bound to the inputs, in input order.
  std::vector<at::Tensor> example_inputs() const;

 private:
  ir::Graph graph_;
  std::vector<at::Tensor> examples_;
  at::Generator generator_;
};

/// Shorthands for arguments.
ir::Argument value(const std::string& name, int id);
ir::Argument scalar(const std::string& name, std::int64_t v);
ir::Argument real(const std::string& name, double v);
ir::Argument ints(const std::string& name, std::vector<std::int64_t> v);
ir::Argument none(const std::string& name);

/// x cast to `dtype` as the tracer records `x.to(dtype)` (aten::to.dtype, a plain cast).
int cast(GraphBuilder& b, int x, c10::ScalarType dtype);

/// x[4, 8] -> relu -> mul(x) -> add(relu) : three elementwise nodes.
ir::Graph elementwise_chain();

/// How many nodes of `g` apply `op` ("aten::softmax").
int count_nodes(const ir::Graph& g, const std::string& op);

}  // namespace zenith::testing
