// Reading the safetensors format (Hugging Face's weight files): an 8-byte little-endian header
// length, a JSON header naming each tensor's dtype, shape and byte range, then the raw bytes.
// Only reading: checkpoints come from elsewhere; tests write their small files by hand.
#pragma once

#include <torch/types.h>

#include <map>
#include <string>

namespace zenith::models {

/// Every tensor of the safetensors file at `path`, keyed by name, on `device`. Throws a c10::Error
/// naming the file (and the tensor) when the file is truncated, its header is not valid JSON, a
/// dtype is unknown or a byte range does not match its shape.
std::map<std::string, torch::Tensor> load_safetensors(const std::string& path,
                                                      const torch::Device& device = torch::kCPU);

}  // namespace zenith::models
