// The safetensors reader and the Hugging Face LLaMA loader, on small files this test writes byte by
// byte (header length, JSON header, raw data) as the format specifies, so that the reader is checked
// against the format rather than against a writer of its own.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <unistd.h>

#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "models/llama.h"
#include "models/llama_safetensors.h"
#include "models/safetensors.h"
#include "common/safetensors_writer.h"

namespace {

using zenith::models::Llama;
using zenith::models::LlamaConfig;

using zenith::testing::hf_state;
using zenith::testing::write_safetensors;

class SafetensorsFile : public ::testing::Test {
 protected:
  void SetUp() override { torch::manual_seed(0); }
  void TearDown() override { std::remove(path.c_str()); }
  std::string path = ::testing::TempDir() + "zenith_test_" + std::to_string(::getpid()) + ".safetensors";
};

TEST_F(SafetensorsFile, ReadsDtypesShapesAndValues) {
  std::map<std::string, torch::Tensor> written = {
      {"a", torch::randn({3, 5})},
      {"b", torch::randn({2, 2}).to(torch::kFloat16)},
      {"c", torch::randn({7}).to(torch::kBFloat16)},
      {"d", torch::arange(6, torch::kLong).view({2, 3})},
      {"empty", torch::zeros({0, 4})}};
  write_safetensors(path, written);
  auto read = zenith::models::load_safetensors(path);
  ASSERT_EQ(read.size(), written.size());
  for (const auto& [name, tensor] : written) {
    ASSERT_TRUE(read.count(name)) << name;
    EXPECT_EQ(read[name].scalar_type(), tensor.scalar_type()) << name;
    EXPECT_TRUE(torch::equal(read[name], tensor)) << name;
  }
}

TEST_F(SafetensorsFile, LlamaLoadsHuggingFaceNamesAndComputesTheSame) {
  const auto config = LlamaConfig::small();
  torch::manual_seed(1);
  Llama source(config);
  write_safetensors(path, hf_state(source));
  torch::manual_seed(2);
  Llama target(config);
  ASSERT_FALSE(torch::equal(source->lm_head->weight, target->lm_head->weight));
  zenith::models::load_llama_safetensors(target, path);
  auto sources = source->named_parameters(true);
  for (const auto& item : target->named_parameters(true)) {
    EXPECT_TRUE(torch::equal(item.value(), sources[item.key()])) << item.key();
  }
  torch::NoGradGuard no_grad;
  auto tokens = torch::randint(config.vocab_size, {1, 6}, torch::kLong);
  auto [k, v] = zenith::models::empty_cache(config, 1);
  EXPECT_TRUE(torch::equal(std::get<0>(target->forward(tokens, k, v)), std::get<0>(source->forward(tokens, k, v))));
}

TEST_F(SafetensorsFile, LlamaConvertsToTheModelDtypeAndTiesAMissingHead) {
  const auto config = LlamaConfig::small();
  Llama source(config);
  auto state = hf_state(source);
  state.erase("lm_head.weight");
  for (auto& [name, tensor] : state) tensor = tensor.to(torch::kBFloat16);
  write_safetensors(path, state);
  Llama target(config);
  zenith::models::load_llama_safetensors(target, path);
  EXPECT_EQ(target->lm_head->weight.scalar_type(), torch::kFloat32);
  EXPECT_TRUE(torch::equal(target->lm_head->weight, state.at("model.embed_tokens.weight").to(torch::kFloat32)));
}

TEST_F(SafetensorsFile, LlamaRejectsAMissingTensorAWrongShapeAndAStrayTensor) {
  const auto config = LlamaConfig::small();
  Llama model(config);
  auto missing = hf_state(model);
  missing.erase("model.layers.1.mlp.up_proj.weight");
  write_safetensors(path, missing);
  EXPECT_THROW(
      try { zenith::models::load_llama_safetensors(model, path); } catch (const c10::Error& e) {
        EXPECT_NE(std::string(e.what()).find("model.layers.1.mlp.up_proj.weight"), std::string::npos);
        throw;
      },
      c10::Error);
  auto wrong = hf_state(model);
  wrong["model.norm.weight"] = torch::ones({config.hidden_size + 1});
  write_safetensors(path, wrong);
  EXPECT_THROW(zenith::models::load_llama_safetensors(model, path), c10::Error);
  auto stray = hf_state(model);
  stray["model.layers.9.self_attn.q_proj.weight"] = torch::ones({2, 2});
  write_safetensors(path, stray);
  EXPECT_THROW(zenith::models::load_llama_safetensors(model, path), c10::Error);
}

TEST_F(SafetensorsFile, RejectsTruncatedFilesAndRangesThatDoNotMatchTheShape) {
  write_safetensors(path, {{"a", torch::randn({4, 4})}});
  {
    std::ifstream in(path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << bytes.substr(0, bytes.size() - 4);  // the last float cut off
  }
  EXPECT_THROW(zenith::models::load_safetensors(path), c10::Error);
  write_safetensors(path, {{"a", torch::randn({4, 4})}}, [](nlohmann::json& header) { header["a"]["shape"] = {4, 5}; });
  EXPECT_THROW(zenith::models::load_safetensors(path), c10::Error);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << "abc";
  EXPECT_THROW(zenith::models::load_safetensors(path), c10::Error);
  EXPECT_THROW(zenith::models::load_safetensors(path + ".absent"), c10::Error);
}

TEST(HfLlamaName, MapsEveryParameterAndRejectsOthers) {
  Llama model(LlamaConfig::small());
  std::set<std::string> names;
  for (const auto& item : model->named_parameters(true)) names.insert(zenith::models::hf_llama_name(item.key()));
  EXPECT_EQ(names.size(), model->named_parameters(true).size());  // no two parameters share a name
  EXPECT_TRUE(names.count("model.layers.0.self_attn.k_proj.weight"));
  EXPECT_TRUE(names.count("model.layers.1.post_attention_layernorm.weight"));
  EXPECT_TRUE(names.count("model.layers.1.mlp.down_proj.weight"));
  EXPECT_THROW(zenith::models::hf_llama_name("layers.0.attention.rotary.weight"), c10::Error);
}

}  // namespace
