// examples/generate and its parts on the CPU, float32, on a small checkpoint this test writes as
// Hugging Face ships one (config.json beside model.safetensors): the config reader, greedy
// generation eagerly and through Zenith over 64 tokens (the tokens equal, the logits within
// 1e-5 of eager's: the CPU plugin runs eager's kernels, other summation orders aside, as in
// test_models_compiled), the divergence report, and the binary itself end to end.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "common/safetensors_writer.h"
#include "common_relative_error.h"
#include "greedy_generation.h"
#include "models/llama.h"
#include "models/llama_hf_config.h"
#include "zenith/compile.h"

namespace {

using zenith::models::Llama;
using zenith::models::LlamaConfig;

nlohmann::json hf_config(const LlamaConfig& c) {
  return {{"model_type", "llama"},
          {"hidden_act", "silu"},
          {"vocab_size", c.vocab_size},
          {"hidden_size", c.hidden_size},
          {"num_hidden_layers", c.num_layers},
          {"num_attention_heads", c.num_heads},
          {"num_key_value_heads", c.num_kv_heads},
          {"intermediate_size", c.intermediate_size},
          {"rope_theta", c.rope_theta},
          {"rms_norm_eps", c.rms_norm_eps},
          {"max_position_embeddings", c.max_position_embeddings},
          {"rope_scaling", nullptr}};
}

class Checkpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    // No std::filesystem: its remove_all crashed here, bound at load to a copy inside libtorch.so.
    folder = ::testing::TempDir() + "zenith_generate_" + std::to_string(::getpid());
    ::mkdir(folder.c_str(), 0700);
    write_config(hf_config(config));
    torch::manual_seed(5);
    Llama source(config);
    zenith::testing::write_safetensors(file("model.safetensors"), zenith::testing::hf_state(source));
  }
  void TearDown() override {
    for (const char* name : {"config.json", "model.safetensors", "output.txt"}) std::remove(file(name).c_str());
    ::rmdir(folder.c_str());
  }
  std::string file(const std::string& name) const { return folder + "/" + name; }
  void write_config(const nlohmann::json& json) const { std::ofstream(file("config.json")) << json.dump(2); }
  std::string config_path() const { return file("config.json"); }

  LlamaConfig config = LlamaConfig::small();
  std::string folder;
};

TEST_F(Checkpoint, ConfigReadsEverySizeAndRefusesWhatLlamaDoesNotCompute) {
  const auto read = zenith::models::load_hf_llama_config(config_path());
  EXPECT_EQ(read.vocab_size, config.vocab_size);
  EXPECT_EQ(read.hidden_size, config.hidden_size);
  EXPECT_EQ(read.num_layers, config.num_layers);
  EXPECT_EQ(read.num_heads, config.num_heads);
  EXPECT_EQ(read.num_kv_heads, config.num_kv_heads);
  EXPECT_EQ(read.intermediate_size, config.intermediate_size);
  EXPECT_DOUBLE_EQ(read.rope_theta, config.rope_theta);
  EXPECT_DOUBLE_EQ(read.rms_norm_eps, config.rms_norm_eps);
  EXPECT_EQ(read.max_position_embeddings, config.max_position_embeddings);

  auto without_kv = hf_config(config);
  without_kv.erase("num_key_value_heads");
  write_config(without_kv);
  EXPECT_EQ(zenith::models::load_hf_llama_config(config_path()).num_kv_heads, config.num_heads) << "absent: one per head";

  auto expect_refused = [&](nlohmann::json json, const std::string& words) {
    write_config(json);
    try {
      zenith::models::load_hf_llama_config(config_path());
      ADD_FAILURE() << "accepted " << json.dump();
    } catch (const std::runtime_error& error) {
      const std::string message = error.what();
      EXPECT_NE(message.find(words), std::string::npos) << message;
      EXPECT_NE(message.find("config.json"), std::string::npos) << "names the file: " << message;
    }
  };
  auto broken = hf_config(config);
  broken.erase("hidden_size");
  expect_refused(broken, "no \"hidden_size\"");
  broken = hf_config(config);
  broken["num_hidden_layers"] = -2;
  expect_refused(broken, "\"num_hidden_layers\" is -2");
  broken = hf_config(config);
  broken["model_type"] = "mistral";
  expect_refused(broken, "model_type is \"mistral\"");
  broken = hf_config(config);
  broken["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  expect_refused(broken, "rope_scaling");
  std::remove(config_path().c_str());
  EXPECT_THROW(zenith::models::load_hf_llama_config(config_path()), std::runtime_error);
}

TEST_F(Checkpoint, CompiledGreedyGenerationGivesEagersTokens) {
  torch::NoGradGuard no_grad;
  Llama llama(config);
  zenith::models::load_llama_safetensors(llama, file("model.safetensors"));
  llama->eval();
  zenith::models::LlamaStaticCache model(llama);
  zenith::CompileOptions options;
  options.fallback_to_eager = false;
  auto fast = zenith::compile(model, options);
  constexpr std::int64_t kNew = 64;
  const auto prompt = torch::tensor({3, 141, 59, 26, 53}, torch::kLong).unsqueeze(0);
  auto [k, v] = zenith::models::static_cache(config, 1, prompt.size(1) + kNew);
  std::vector<std::int64_t> seen;
  const auto eager = zenith::examples::generate_greedy(
      [&](const at::Tensor& t, const at::Tensor& p, const at::Tensor& kc, const at::Tensor& vc) { return model->forward(t, p, kc, vc); },
      prompt, kNew, k, v, [&](std::int64_t done) { seen.push_back(done); }, 16);
  EXPECT_EQ(seen, (std::vector<std::int64_t>{16, 32, 48, 64})) << "progress every 16 tokens";
  const auto compiled = zenith::examples::generate_greedy(
      [&](const at::Tensor& t, const at::Tensor& p, const at::Tensor& kc, const at::Tensor& vc) { return fast(t, p, kc, vc); },
      prompt, kNew, k, v);
  ASSERT_EQ(compiled.tokens.size(), static_cast<std::size_t>(kNew));
  EXPECT_EQ(compiled.tokens, eager.tokens);
  EXPECT_LE(zenith::testing::relative_error(compiled.logits, eager.logits), 1e-5);
  EXPECT_TRUE(zenith::examples::compare_generations(eager, compiled).equal);
  EXPECT_EQ(fast.stats().eager_calls, 0);
  EXPECT_EQ(fast.stats().hits, kNew - 2) << "the prompt and the first step captured, every later step a plan hit";

  // A generation that parts from eager's is reported at its first different token.
  auto other = compiled;
  other.tokens[7] = (other.tokens[7] + 1) % config.vocab_size;
  other.logits[7][0] += 1.0f;
  const auto d = zenith::examples::compare_generations(eager, other);
  EXPECT_FALSE(d.equal);
  EXPECT_EQ(d.index, 7);
  EXPECT_EQ(d.reference, eager.tokens[7]);
  EXPECT_EQ(d.other, other.tokens[7]);
  EXPECT_NEAR(d.max_logit_difference, 1.0, 1e-5);
  EXPECT_GE(d.reference_margin, 0.0);
  EXPECT_NE(d.describe(kNew).find("first divergence at new token 7"), std::string::npos) << d.describe(kNew);
}

TEST_F(Checkpoint, TheExampleGeneratesAndChecksItsTokens) {
  const auto output = file("output.txt");
  const std::string command = std::string(ZENITH_GENERATE_BINARY) + " --checkpoint " + folder +
                              " --device cpu --dtype float32 --new-tokens 40 --prompt 3,141,59 > " + output +
                              " 2>&1";
  const int status = std::system(command.c_str());
  std::stringstream text;
  text << std::ifstream(output).rdbuf();
  ASSERT_EQ(status, 0) << text.str();
  EXPECT_NE(text.str().find("greedy tokens equal eager's for all 40 tokens"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("tokens/s"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("[generate] Zenith: 32 of 40 tokens"), std::string::npos) << "progress on stderr: " << text.str();

  const std::string bad = std::string(ZENITH_GENERATE_BINARY) + " --checkpoint " + folder +
                          " --device cpu --prompt 3,99999 > " + output + " 2>&1";
  EXPECT_NE(std::system(bad.c_str()), 0) << "a token beyond the vocabulary";
  std::stringstream refused;
  refused << std::ifstream(output).rdbuf();
  EXPECT_NE(refused.str().find("beyond the vocabulary"), std::string::npos) << refused.str();
}

}  // namespace
