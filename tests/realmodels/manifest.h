// The exporter's manifest (tests/realmodels/export_models.py writes manifest.json): which models
// were exported where, on what device and dtype, and the inputs each takes at three shapes; or,
// for a model the exporter could not build, trace or save, "export_error" with the reason.
#pragma once

#include <string>
#include <vector>

#include <ATen/core/ivalue.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <nlohmann/json.hpp>

namespace zenith::testing {

/// One exported model: its manifest entry and the folder its file lies in.
struct ManifestEntry {
  nlohmann::json json;
  std::string dir;
};

/// The models of $ZENITH_REALMODELS_DIR/manifest.json, narrowed by ZENITH_REALMODELS_ONLY (comma-
/// separated names); empty when either the variable or the file is missing.
std::vector<ManifestEntry> manifest_models();

/// Fresh inputs of the manifest's kinds (`specs`: an entry's "inputs", "second_inputs" or
/// "third_inputs"): token ids below the vocabulary, an attention mask whose rows keep a random
/// prefix (padding after it), images from a normal distribution in `dtype`.
std::vector<c10::IValue> make_inputs(const nlohmann::json& specs, c10::Device device, c10::ScalarType dtype);

}  // namespace zenith::testing
