// Building the small node groups the conformance cases run, as a backend would receive them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/graph.h"

namespace zenith::conformance {

/// Builds a group ("kind": "group") node by node. Only the inputs are typed by hand: build() runs
/// the nodes once through the ATen dispatcher and records the dtype, sizes and strides ATen gives
/// each result, which is what the host would have traced.
class GroupBuilder {
 public:
  /// A contiguous float32 CPU input.
  int input(const std::vector<std::int64_t>& sizes);
  /// A float32 CPU input of 2-D `sizes` stored as the transpose of a contiguous tensor: the case of
  /// a kernel that must honour strides rather than assume a dense row-major layout.
  int transposed_input(const std::vector<std::int64_t>& sizes);
  /// Appends a node with one result; returns the result's value id.
  int node(const std::string& op, const std::string& overload, std::vector<ir::Argument> args);
  /// Marks a value as a group output (a fresh tensor the host allocates).
  void output(int id);
  /// The finished group. Throws zenith::Error when a node does not run in ATen.
  ir::Graph build() const;

 private:
  int add_input(ir::TensorType type);
  ir::Graph graph_;
};

/// Argument shorthands, named as the schema names them.
ir::Argument tensor_arg(const std::string& name, int id);
ir::Argument int_arg(const std::string& name, std::int64_t value);
ir::Argument ints_arg(const std::string& name, std::vector<std::int64_t> values);
ir::Argument double_arg(const std::string& name, double value);
ir::Argument bool_arg(const std::string& name, bool value);
ir::Argument string_arg(const std::string& name, const std::string& value);
ir::Argument none_arg(const std::string& name);

}  // namespace zenith::conformance
