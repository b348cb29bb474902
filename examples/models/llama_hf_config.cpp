#include "models/llama_hf_config.h"

#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace zenith::models {
namespace {

std::runtime_error config_error(const std::string& path, const std::string& what) {
  return std::runtime_error("Hugging Face config " + path + ": " + what);
}

int64_t positive_integer(const nlohmann::json& config, const char* key, const std::string& path) {
  if (!config.contains(key)) throw config_error(path, std::string("no \"") + key + "\"");
  const auto& value = config.at(key);
  if (!value.is_number_integer() || value.get<int64_t>() <= 0) {
    throw config_error(path, std::string("\"") + key + "\" is " + value.dump() + ", expected a positive integer");
  }
  return value.get<int64_t>();
}

double positive_number(const nlohmann::json& config, const char* key, double fallback, const std::string& path) {
  if (!config.contains(key)) return fallback;
  const auto& value = config.at(key);
  if (!value.is_number() || value.get<double>() <= 0) {
    throw config_error(path, std::string("\"") + key + "\" is " + value.dump() + ", expected a positive number");
  }
  return value.get<double>();
}

}  // namespace

LlamaConfig load_hf_llama_config(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw config_error(path, "cannot be read");
  const auto config = nlohmann::json::parse(in, nullptr, false);
  if (!config.is_object()) throw config_error(path, "is not a JSON object");
  const auto model_type = config.value("model_type", std::string("llama"));
  if (model_type != "llama") {
    throw config_error(path, "model_type is \"" + model_type + "\"; the zoo's Llama computes \"llama\" checkpoints only");
  }
  const auto activation = config.value("hidden_act", std::string("silu"));
  if (activation != "silu") throw config_error(path, "hidden_act is \"" + activation + "\"; Llama's MLP uses silu");
  if (config.contains("rope_scaling") && !config.at("rope_scaling").is_null()) {
    throw config_error(path, "rope_scaling " + config.at("rope_scaling").dump() + " is not supported (plain RoPE only)");
  }
  LlamaConfig c;
  c.vocab_size = positive_integer(config, "vocab_size", path);
  c.hidden_size = positive_integer(config, "hidden_size", path);
  c.num_layers = positive_integer(config, "num_hidden_layers", path);
  c.num_heads = positive_integer(config, "num_attention_heads", path);
  c.num_kv_heads = config.contains("num_key_value_heads") ? positive_integer(config, "num_key_value_heads", path) : c.num_heads;
  c.intermediate_size = positive_integer(config, "intermediate_size", path);
  c.rope_theta = positive_number(config, "rope_theta", 10000.0, path);
  c.rms_norm_eps = positive_number(config, "rms_norm_eps", 1e-6, path);
  c.max_position_embeddings = positive_integer(config, "max_position_embeddings", path);
  return c;
}

}  // namespace zenith::models
