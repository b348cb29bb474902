#include "passes/kept_weight_copies.h"

namespace zenith::passes {

bool weight_copy_kept(const ir::TensorType& weight, const ir::TensorType& output, double fraction) {
  return static_cast<double>(weight.numel()) <= fraction * static_cast<double>(output.numel());
}

}  // namespace zenith::passes
