// A safetensors writer for tests: header length, JSON header, raw data, byte by byte as the format
// specifies (https://github.com/huggingface/safetensors), so that the project's reader is checked
// against the format rather than against a writer of its own; and a zoo Llama's state under
// Hugging Face's names, as a downloaded checkpoint holds it.
#pragma once

#include <cstdint>
#include <fstream>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "models/llama.h"
#include "models/llama_safetensors.h"

namespace zenith::testing {

inline std::string safetensors_dtype(torch::ScalarType type) {
  switch (type) {
    case torch::kFloat32: return "F32";
    case torch::kFloat16: return "F16";
    case torch::kBFloat16: return "BF16";
    case torch::kInt64: return "I64";
    default: throw std::runtime_error("test writer: unexpected dtype");
  }
}

/// Writes `tensors` as a safetensors file; `header_patch` may alter an entry to make a broken file.
inline void write_safetensors(const std::string& path, const std::map<std::string, torch::Tensor>& tensors,
                              const std::function<void(nlohmann::json&)>& header_patch = nullptr) {
  nlohmann::json header = nlohmann::json::object();
  header["__metadata__"] = {{"format", "pt"}};
  std::string data;
  for (const auto& [name, tensor] : tensors) {
    auto t = tensor.contiguous().cpu();
    const auto begin = data.size();
    data.append(static_cast<const char*>(t.data_ptr()), t.nbytes());
    header[name] = {{"dtype", safetensors_dtype(t.scalar_type())}, {"shape", t.sizes().vec()}, {"data_offsets", {begin, data.size()}}};
  }
  if (header_patch) header_patch(header);
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the format pads the header to 8 bytes with spaces
  std::ofstream out(path, std::ios::binary);
  const std::uint64_t length = text.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((length >> (8 * i)) & 0xff));
  out << text << data;
}

/// Every parameter of `model` under its Hugging Face name.
inline std::map<std::string, torch::Tensor> hf_state(models::Llama& model) {
  std::map<std::string, torch::Tensor> state;
  for (const auto& item : model->named_parameters(true)) state[models::hf_llama_name(item.key())] = item.value().detach();
  return state;
}

}  // namespace zenith::testing
