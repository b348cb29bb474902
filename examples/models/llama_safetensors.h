// Loading Hugging Face LLaMA checkpoints (TinyLlama-1.1B and its relatives) into the zoo's Llama.
// Hugging Face names the same weights differently ("model.layers.0.self_attn.q_proj.weight" is
// this model's "layers.0.attention.q_proj.weight"); its q and k projections are already in the
// rotate-half layout this model uses, so weights are copied as they are, only renamed.
#pragma once

#include <string>

#include "models/llama.h"

namespace zenith::models {

/// The Hugging Face name of a parameter of Llama, e.g. "layers.3.mlp.w1.weight" ->
/// "model.layers.3.mlp.gate_proj.weight". Throws for a name Llama does not have.
std::string hf_llama_name(const std::string& name);

/// Copies the weights of the safetensors file at `path` into `model`, converting them to the dtype
/// and device of each parameter. Every parameter must be found with its shape; a file without
/// lm_head.weight is taken as tied to the token embedding. A tensor of the file that the model
/// has no place for is an error as well (another architecture or config), except the rotary
/// inv_freq buffers older checkpoints carry, which Llama recomputes.
void load_llama_safetensors(Llama& model, const std::string& path);

}  // namespace zenith::models
