// Fusion: marks groups of elementwise nodes (producer into consumer), with the row reductions and
// normalizations among them (sum, mean, amax, amin, var, std, softmax, log_softmax, layer_norm over
// trailing dimensions; core/row_reduction.h), that a backend may run as one kernel. A group's
// reductions all read the same rows, and its other nodes give a value per element or per row of
// them. A group computed from parameters alone (a batch norm's per-channel scale) joins the one
// elementwise group that reads it, which computes it per element. A decode step's attention (at
// most kAttentionWithBlindRowsMaxRows query rows a head) and the attention_blind_rows node after it
// form a group of their own (core/attention_blind_rows.h). It only proposes: partitioning
// offers each group whole to the backends and splits a group nobody claims back into single nodes.
#pragma once

#include <cstddef>

#include "passes/pass.h"

namespace zenith::passes {

class ElementwiseFusion : public Pass {
 public:
  /// Groups stop growing at `max_nodes` (long chains make kernels that compile slowly).
  explicit ElementwiseFusion(std::size_t max_nodes = 64) : max_nodes_(max_nodes) {}
  std::string name() const override { return "fuse_elementwise"; }
  /// Sets Node::fusion_group; counters "groups" and "fused_nodes".
  void run(ir::Graph& graph, PassReport& report) override;

 private:
  std::size_t max_nodes_;
};

}  // namespace zenith::passes
