// Reading a Hugging Face LLaMA checkpoint's config.json into the zoo's LlamaConfig, so that a
// downloaded TinyLlama-family checkpoint (config.json beside model.safetensors) loads with the
// sizes it was trained with.
#pragma once

#include <string>

#include "models/llama.h"

namespace zenith::models {

/// The LlamaConfig of the Hugging Face config.json at `path`: vocab_size, hidden_size,
/// num_hidden_layers, num_attention_heads, num_key_value_heads (num_attention_heads when absent),
/// intermediate_size, rope_theta (10000 when absent), rms_norm_eps and max_position_embeddings.
/// Throws std::runtime_error naming the file and the key when the file cannot be read, a key is
/// missing or not a positive number, or the checkpoint is one this model does not compute: another
/// model_type than "llama", an activation other than SiLU, or rope_scaling.
LlamaConfig load_hf_llama_config(const std::string& path);

}  // namespace zenith::models
