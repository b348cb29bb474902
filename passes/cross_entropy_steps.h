// aten::cross_entropy_loss as the two steps ATen computes it by (log_softmax over the class
// dimension, then nll_loss_nd), written out in the graph. The training rewrite splits it so that each
// step gets its own derivative rule; the autocast capture splits it to put autocast's cast between
// the steps in the open.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include <c10/core/ScalarType.h>

#include "core/graph.h"

namespace zenith::passes {

/// Whether `node` is a cross_entropy_loss that is exactly log_softmax then nll_loss_nd: one result,
/// class-index targets (not probabilities) and no label smoothing.
bool splits_into_cross_entropy_steps(const ir::Graph& graph, const ir::Node& node);

/// Makes the value of a new step's result: called with the step (arguments set, outputs empty) and
/// the logits' value id, it adds the value to the graph and returns its id.
using NewStepValue = std::function<int(const ir::Node& step, int logits)>;

/// The steps replacing `node` (for which splits_into_cross_entropy_steps holds), in order; the last
/// writes `node`'s result. With `cast_to`, the log-probabilities are computed in the logits' dtype,
/// named explicitly (autocast leaves an op with an explicit dtype alone), and cast to `cast_to`
/// before the loss, as autocast's nll_loss did. Without it, log_softmax has no dtype argument.
std::vector<ir::Node> cross_entropy_steps(const ir::Graph& graph, const ir::Node& node,
                                          std::optional<c10::ScalarType> cast_to, const NewStepValue& new_value);

}  // namespace zenith::passes
