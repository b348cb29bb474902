#include "models/llama_safetensors.h"

#include <c10/util/Exception.h>
#include <torch/torch.h>

#include <map>
#include <regex>
#include <set>

#include "models/safetensors.h"

namespace zenith::models {

namespace {

// Per-layer submodule names: this model's on the left, Hugging Face's on the right.
const std::map<std::string, std::string>& layer_renames() {
  static const std::map<std::string, std::string> renames = {
      {"attention_norm.weight", "input_layernorm.weight"},
      {"mlp_norm.weight", "post_attention_layernorm.weight"},
      {"attention.q_proj.weight", "self_attn.q_proj.weight"},
      {"attention.k_proj.weight", "self_attn.k_proj.weight"},
      {"attention.v_proj.weight", "self_attn.v_proj.weight"},
      {"attention.o_proj.weight", "self_attn.o_proj.weight"},
      {"mlp.w1.weight", "mlp.gate_proj.weight"},
      {"mlp.w2.weight", "mlp.down_proj.weight"},
      {"mlp.w3.weight", "mlp.up_proj.weight"}};
  return renames;
}

bool is_rotary_buffer(const std::string& hf_name) {
  static const std::string suffix = "rotary_emb.inv_freq";
  return hf_name.size() >= suffix.size() && hf_name.compare(hf_name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::string hf_llama_name(const std::string& name) {
  if (name == "embed_tokens.weight") return "model.embed_tokens.weight";
  if (name == "norm.weight") return "model.norm.weight";
  if (name == "lm_head.weight") return "lm_head.weight";
  static const std::regex layer(R"(layers\.(\d+)\.(.+))");
  std::smatch match;
  if (std::regex_match(name, match, layer)) {
    auto found = layer_renames().find(match[2].str());
    if (found != layer_renames().end()) return "model.layers." + match[1].str() + "." + found->second;
  }
  TORCH_CHECK(false, "hf_llama_name: '", name, "' is not a parameter of the zoo's Llama");
}

void load_llama_safetensors(Llama& model, const std::string& path) {
  auto tensors = load_safetensors(path);
  std::set<std::string> used;
  torch::NoGradGuard no_grad;
  for (auto& item : model->named_parameters(/*recurse=*/true)) {
    std::string hf_name = hf_llama_name(item.key());
    if (!tensors.count(hf_name) && hf_name == "lm_head.weight") hf_name = "model.embed_tokens.weight";  // tied
    auto found = tensors.find(hf_name);
    TORCH_CHECK(found != tensors.end(), "load_llama_safetensors: ", path, " has no tensor '", hf_name, "' for ",
                item.key());
    torch::Tensor& target = item.value();
    TORCH_CHECK(found->second.sizes() == target.sizes(), "load_llama_safetensors: ", path, ": '", hf_name,
                "' has shape ", found->second.sizes(), " but the model's ", item.key(), " has ", target.sizes(),
                " (is the LlamaConfig the checkpoint's?)");
    target.copy_(found->second);
    used.insert(hf_name);
  }
  for (const auto& [name, tensor] : tensors) {
    TORCH_CHECK(used.count(name) || is_rotary_buffer(name), "load_llama_safetensors: ", path, " holds '", name,
                "', which the model has no parameter for (another architecture or config?)");
  }
}

}  // namespace zenith::models
