#include "manifest.h"

#include <cstdlib>
#include <fstream>

#include <torch/torch.h>

namespace zenith::testing {

std::vector<ManifestEntry> manifest_models() {
  const char* dir = std::getenv("ZENITH_REALMODELS_DIR");
  if (dir == nullptr) return {};
  std::ifstream file(std::string(dir) + "/manifest.json");
  if (!file) return {};
  std::string only = std::getenv("ZENITH_REALMODELS_ONLY") ? std::getenv("ZENITH_REALMODELS_ONLY") : "";
  const auto manifest = nlohmann::json::parse(file);  // named: a temporary's member would dangle in the loop
  std::vector<ManifestEntry> entries;
  for (const auto& model : manifest.at("models")) {
    const std::string name = model.at("name");
    if (only.empty() || ("," + only + ",").find("," + name + ",") != std::string::npos) entries.push_back({model, dir});
  }
  return entries;
}

std::vector<c10::IValue> make_inputs(const nlohmann::json& specs, c10::Device device, c10::ScalarType dtype) {
  std::vector<c10::IValue> inputs;
  for (const auto& spec : specs) {
    std::vector<std::int64_t> shape = spec.at("shape");
    const std::string kind = spec.at("kind");
    auto longs = at::TensorOptions().dtype(at::kLong);
    if (kind == "ids") {
      inputs.emplace_back(torch::randint(spec.at("high").get<std::int64_t>(), shape, longs).to(device));
    } else if (kind == "mask") {
      auto lengths = torch::randint(1, shape.back() + 1, {shape.front(), 1}, longs);
      inputs.emplace_back((torch::arange(shape.back(), longs).unsqueeze(0) < lengths).to(at::kLong).to(device));
    } else {
      inputs.emplace_back(torch::randn(shape).to(device, dtype));
    }
  }
  return inputs;
}

}  // namespace zenith::testing
