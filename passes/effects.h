// Side effects and mutation, as the rewriting passes must respect them.
#pragma once

#include <vector>

#include "core/graph.h"

namespace zenith::passes {

/// Facts about every node and value of a graph that decide what a pass may move, merge or drop.
struct Effects {
  /// Per node: writes memory (an in-place op) or draws random numbers; never dropped or merged.
  std::vector<bool> node_has_effect;
  /// Per value id: its memory may be written by some node (it is, or aliases through views, a
  /// value an in-place op writes); reading it is not a pure function of the graph's inputs.
  std::vector<bool> value_mutable;
  /// Per node: has an effect the caller can see: draws random numbers, or writes memory that is,
  /// or aliases, a graph input (an argument, a parameter or a buffer) or a tensor constant (the
  /// module keeps it). Writing a tensor the forward made itself (eval dropout_ on an activation,
  /// fill_ on a fresh mask) is not.
  std::vector<bool> node_has_visible_effect;
};

/// Analyses `graph` from the op schemas and the op registry.
Effects analyse_effects(const ir::Graph& graph);

/// The first node with an effect the caller can see (Effects::node_has_visible_effect), or -1:
/// what a forward run again (probes) or stopped midway (value checks) must not have.
int first_visible_effect(const Effects& effects);

}  // namespace zenith::passes
