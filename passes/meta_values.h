// A graph's values as meta tensors (dtype, sizes and strides, no data): running a node on them
// through the dispatcher gives its results' types as ATen will lay them out at run time. Passes
// that write new nodes, or change what a node reads, type the results so.
#pragma once

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

}  // namespace zenith::passes
