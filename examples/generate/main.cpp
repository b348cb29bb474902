// Generating text with a Hugging Face LLaMA-family checkpoint, eagerly and through Zenith.
//
//   generate --checkpoint FOLDER [--prompt 1,15043,29892] [--new-tokens 128] [--device cuda|cpu]
//            [--dtype float16|bfloat16|float32]
//
// FOLDER holds the checkpoint as Hugging Face ships it: config.json and model.safetensors
// (TinyLlama-1.1B, or any "llama" model without rope_scaling). The prompt is token ids (no
// tokenizer here). The model runs in its static-cache form (models/llama.h: the caches allocated
// once and written in place), greedy: each new token is the argmax of the last logits. Eager
// LibTorch generates first, then Zenith (a first generation that compiles, then a timed one);
// prints both rates in tokens/s, the share of the weight-streaming bound (every weight read once
// per token, at this device's measured copy bandwidth) and whether Zenith's tokens equal eager's
// (float16 rounding may flip a near-tie: then the first divergence and the logits there). Progress
// goes to stderr. Defaults: cuda with float16 when a device is there, else cpu with float32.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "greedy_generation.h"
#include "models/llama.h"
#include "models/llama_hf_config.h"
#include "models/llama_safetensors.h"
#include "zenith/compile.h"

namespace {

using zenith::examples::Generation;

struct Options {
  std::string checkpoint;
  std::vector<std::int64_t> prompt = {1, 15043, 29892, 590, 1024, 338};
  std::int64_t new_tokens = 128;
  torch::Device device = torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  c10::ScalarType dtype = torch::cuda::is_available() ? torch::kHalf : torch::kFloat;
};

int usage(const std::string& why) {
  std::fprintf(stderr,
               "generate: %s\nusage: generate --checkpoint FOLDER [--prompt 1,15043,29892] [--new-tokens 128] "
               "[--device cuda|cpu] [--dtype float16|bfloat16|float32]\n",
               why.c_str());
  return 2;
}

std::vector<std::int64_t> token_ids(const std::string& text) {
  std::vector<std::int64_t> ids;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    std::size_t used = 0;
    const long long id = std::stoll(item, &used);
    if (used != item.size() || id < 0) throw std::invalid_argument("not a token id: \"" + item + "\"");
    ids.push_back(id);
  }
  if (ids.empty()) throw std::invalid_argument("the prompt has no token ids");
  return ids;
}

// Bytes a device copies per second (read plus written), over a 256 MiB buffer: the rate at which
// a token's weights can at best be streamed.
double copy_bytes_per_second(const torch::Device& device) {
  auto source = torch::empty({64 << 20}, torch::TensorOptions().dtype(torch::kFloat).device(device)).fill_(1.0f);
  auto target = torch::empty_like(source);
  auto sync = [&] { if (device.is_cuda()) torch::cuda::synchronize(); };
  for (int i = 0; i < 3; ++i) target.copy_(source);
  sync();
  constexpr int kCopies = 10;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kCopies; ++i) target.copy_(source);
  sync();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return 2.0 * static_cast<double>(source.nbytes()) * kCopies / seconds;
}

void report(const char* mode, const Generation& g, std::int64_t tokens, double bound_ms) {
  const double ms_per_token = g.decode_ms / static_cast<double>(tokens);
  std::printf("%-8s prompt %8.2f ms | %8.1f tokens/s | %7.3f ms/token | %5.1f%% of the weight-streaming bound\n", mode,
              g.prompt_ms, 1000.0 / ms_per_token, ms_per_token, 100.0 * bound_ms / ms_per_token);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  try {
    for (int i = 1; i < argc; i += 2) {
      const std::string flag = argv[i];
      if (i + 1 >= argc) return usage(flag + " needs a value");
      const std::string value = argv[i + 1];
      if (flag == "--checkpoint") o.checkpoint = value;
      else if (flag == "--prompt") o.prompt = token_ids(value);
      else if (flag == "--new-tokens") o.new_tokens = std::stoll(value);
      else if (flag == "--device") o.device = torch::Device(value);
      else if (flag == "--dtype" && value == "float16") o.dtype = torch::kHalf;
      else if (flag == "--dtype" && value == "bfloat16") o.dtype = torch::kBFloat16;
      else if (flag == "--dtype" && value == "float32") o.dtype = torch::kFloat;
      else return usage("unknown argument " + flag + " " + value);
    }
  } catch (const std::exception& error) {
    return usage(error.what());
  }
  if (o.checkpoint.empty()) return usage("--checkpoint is required");
  if (o.new_tokens < 1) return usage("--new-tokens must be at least 1");
  try {
    torch::NoGradGuard no_grad;
    const auto config = zenith::models::load_hf_llama_config(o.checkpoint + "/config.json");
    for (auto id : o.prompt) {
      if (id >= config.vocab_size) return usage("token id " + std::to_string(id) + " is beyond the vocabulary");
    }
    zenith::models::Llama llama(config);
    zenith::models::load_llama_safetensors(llama, o.checkpoint + "/model.safetensors");
    llama->eval();
    llama->to(o.device, o.dtype);
    zenith::models::LlamaStaticCache model(llama);
    double weight_bytes = 0;  // every weight a token reads whole: all but the token embedding
    for (const auto& item : llama->named_parameters(true)) {
      if (item.key() != "embed_tokens.weight") weight_bytes += static_cast<double>(item.value().nbytes());
    }
    const double bound_ms = 1000.0 * weight_bytes / copy_bytes_per_second(o.device);
    std::printf("%lld layers, hidden %lld, %.2f GB of weights streamed per token on %s (%s): bound %.3f ms/token\n",
                static_cast<long long>(config.num_layers), static_cast<long long>(config.hidden_size), weight_bytes / 1e9,
                o.device.str().c_str(), c10::toString(o.dtype), bound_ms);

    const auto prompt =
        torch::tensor(o.prompt, torch::TensorOptions().dtype(torch::kLong)).unsqueeze(0).to(o.device);
    const auto slots = prompt.size(1) + o.new_tokens;
    if (slots > config.max_position_embeddings) {
      return usage("the prompt and the new tokens need " + std::to_string(slots) + " positions, the model has " +
                   std::to_string(config.max_position_embeddings));
    }
    auto [cache_k, cache_v] =
        zenith::models::static_cache(config, 1, slots, torch::TensorOptions().dtype(o.dtype).device(o.device));
    auto progress = [&](const char* what) {
      return [what, &o](std::int64_t done) {
        std::fprintf(stderr, "[generate] %s: %lld of %lld tokens\n", what, static_cast<long long>(done),
                     static_cast<long long>(o.new_tokens));
      };
    };
    const auto eager = zenith::examples::generate_greedy(
        [&](const at::Tensor& t, const at::Tensor& p, const at::Tensor& k, const at::Tensor& v) { return model->forward(t, p, k, v); },
        prompt, o.new_tokens, cache_k, cache_v, progress("eager"));
    auto fast = zenith::compile(model);
    auto compiled = [&](const at::Tensor& t, const at::Tensor& p, const at::Tensor& k, const at::Tensor& v) {
      return fast(t, p, k, v);
    };
    const auto first = zenith::examples::generate_greedy(compiled, prompt, o.new_tokens, cache_k, cache_v,
                                                         progress("Zenith, first generation (compiles)"));
    const auto timed = zenith::examples::generate_greedy(compiled, prompt, o.new_tokens, cache_k, cache_v,
                                                         progress("Zenith"));
    report("eager", eager, o.new_tokens, bound_ms);
    report("Zenith", timed, o.new_tokens, bound_ms);
    std::printf("Zenith's first generation (capture and compile): %.0f ms\n", first.prompt_ms + first.decode_ms);
    std::printf("%s\n", zenith::examples::compare_generations(eager, timed).describe(o.new_tokens).c_str());
    std::printf("tokens:");
    for (auto t : timed.tokens) std::printf(" %lld", static_cast<long long>(t));
    std::printf("\n");
  } catch (const std::exception& error) {
    std::fprintf(stderr, "generate: %s\n", error.what());
    return 1;
  }
  return 0;
}
