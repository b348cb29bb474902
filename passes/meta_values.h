// A graph's values as meta tensors (dtype, sizes and strides, no data): running a node on them
// through the dispatcher gives its results' types as ATen will lay them out at run time. Passes
// that write new nodes, or change what a node reads, type the results so.
#pragma once

#include <cstddef>
#include <set>
#include <unordered_map>
#include <vector>

#include <ATen/core/Tensor.h>

#include "core/graph.h"

namespace zenith::passes {

class MetaValues {
 public:
  /// Reads `graph`'s types as they are when a value is first needed; the graph may grow meanwhile.
  explicit MetaValues(const ir::Graph& graph) : graph_(graph) {}

  /// `node`'s results on the meta tensors of what it reads. Throws what the op throws (an op without
  /// a meta kernel, arguments that do not fit).
  std::vector<at::Tensor> run(const ir::Node& node);

  /// Makes value `id` this meta tensor from now on (a result of run the caller keeps).
  void set(int id, at::Tensor tensor) { tensors_[id] = std::move(tensor); }

 private:
  const at::Tensor& tensor(int id);

  const ir::Graph& graph_;
  std::unordered_map<int, at::Tensor> tensors_;
};

/// Types `node`'s one result on the meta tensors of what it reads, on the device of its first
/// tensor input, and makes it value `output` (a new intermediate value when -1); returns the value.
/// Throws what the op throws, or when `output`'s dtype or sizes would change.
int type_result(ir::Graph& graph, MetaValues& meta, ir::Node& node, int output = -1);

/// Types again, on meta tensors, every node from index `from` on that reads a value in `changed`
/// (values whose types the caller already set: a rewrite changed their layout), and in turn what
/// reads those nodes' results. Returns false when a node's result would change dtype or sizes,
/// when a node cannot be typed (a view of a layout it cannot view) or when a returned value's
/// layout would change; the graph is then partly retyped and the caller drops it. A scaled dot
/// product attention keeps its result's type (the executor lays its result out so).
bool retype_readers(ir::Graph& graph, std::set<int> changed, std::size_t from);

}  // namespace zenith::passes
