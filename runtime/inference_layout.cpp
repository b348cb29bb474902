// Inference graphs on a CUDA device run their convolutions channels-last
// (capture/inference_layout.h, CompileOptions::channels_last).
#include "runtime/engine.h"

#include <limits>

#include "capture/inference_layout.h"
#include "core/log.h"

namespace zenith::detail {

void Engine::relayout_for_inference(ir::Graph& graph, const std::vector<at::Tensor>& inputs) const {
  if (!options_.channels_last) return;
  std::string why;
  // Without kept derived values every copy is made at each call anyway: a copy of each weight.
  const double kept_fraction =
      options_.keep_derived_values ? options_.kept_weight_fraction : std::numeric_limits<double>::infinity();
  if (capture::channels_last_for_inference(graph, inputs, why, /*cuda_only=*/true, kept_fraction)) {
    log::debug("{}: the convolutions run channels-last", options_.name);
  } else if (!why.empty()) {
    log::info("{}: the convolutions keep the call's layout: {}", options_.name, why);
  }
}

}  // namespace zenith::detail
