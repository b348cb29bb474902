// The backward of one training signature as IR, and how its inputs and outputs relate to the
// forward graph it differentiates.
#pragma once

#include <vector>

#include "core/graph.h"

namespace zenith::autodiff {

struct BackwardGraph {
  /// Inputs: the saved forward values, then the gradients of some forward outputs. Outputs: the
  /// gradients of some forward inputs.
  ir::Graph graph;
  /// Per leading input of `graph`: the forward value id it is.
  std::vector<int> saved;
  /// Per trailing input of `graph`: the index into the forward graph's outputs whose gradient it is.
  std::vector<int> output_gradients;
  /// Per output of `graph`: the index into the forward graph's inputs whose gradient it is.
  std::vector<int> input_gradients;
  /// Forward values the backward computes again rather than reading them saved.
  int recomputed = 0;
};

/// Replaces saved values that a cheap elementwise forward node computes from other saved values
/// (or from the call's inputs and constants) by that node, copied into the backward: the backward
/// recomputes them and the forward keeps less memory alive. Never adds a saved value that holds
/// memory of its own.
void rematerialize(const ir::Graph& forward, BackwardGraph& backward);

}  // namespace zenith::autodiff
