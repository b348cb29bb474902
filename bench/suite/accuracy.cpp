#include "accuracy.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

namespace zenith::bench {

double max_relative_error(const Tensors& got, const Tensors& expected) {
  if (got.size() != expected.size()) {
    throw std::runtime_error("returned " + std::to_string(got.size()) + " outputs, eager " +
                             std::to_string(expected.size()));
  }
  double difference = 0, scale = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i].sizes() != expected[i].sizes()) {
      std::ostringstream message;
      message << "output " << i << " has shape " << got[i].sizes() << ", eager's " << expected[i].sizes();
      throw std::runtime_error(message.str());
    }
    if (expected[i].numel() == 0) continue;
    auto e = expected[i].to(at::kFloat);
    auto g = got[i].to(e.device(), at::kFloat);
    difference = std::max(difference, (g - e).abs().max().item<double>());
    scale = std::max(scale, e.abs().max().item<double>());
  }
  if (!std::isfinite(difference)) return difference;
  return scale > 0 ? difference / scale : difference;
}

double tolerance(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::ScalarType::Half: return 2e-2;
    case c10::ScalarType::BFloat16: return 5e-2;
    default: return 5e-3;
  }
}

double check_close(const Tensors& got, const Tensors& expected, c10::ScalarType dtype, const std::string& what) {
  const double error = max_relative_error(got, expected);
  if (!(error <= tolerance(dtype))) {
    std::ostringstream message;
    message << what << ": max relative error " << error << " exceeds " << tolerance(dtype) << " for "
            << c10::toString(dtype);
    throw std::runtime_error(message.str());
  }
  return error;
}

}  // namespace zenith::bench
