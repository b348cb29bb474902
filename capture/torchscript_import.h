// Converts a traced TorchScript graph into the Zenith IR. Nothing after capture sees TorchScript.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <torch/csrc/jit/ir/ir.h>

#include "core/graph.h"

namespace zenith::capture {

/// Names and roles of the traced graph's inputs, in order.
struct InputBinding {
  ir::ValueRole role = ir::ValueRole::Input;
  std::string name;
};

/// Converts `graph` (complete tensor types, as the tracer leaves them). Non-tensor constants become
/// node arguments, tensor lists become list arguments, tuples at the output become the output
/// structure. Throws zenith::Error naming the node for anything the IR cannot hold (an op with no
/// schema, a non-tensor value computed at run time, a tensor of unknown shape). The last
/// `unstructured_outputs` outputs of `graph` are tensors the caller added (value guards): they
/// become the IR's last outputs, outside the output structure.
ir::Graph import_torchscript(const std::shared_ptr<torch::jit::Graph>& graph, const std::vector<InputBinding>& inputs,
                             std::size_t unstructured_outputs = 0);

}  // namespace zenith::capture
