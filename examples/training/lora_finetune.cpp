// LoRA fine-tuning: a LLaMA decoder with LoRA adapters (rank 8, alpha 32) on its attention
// projections q, k, v and o, base weights frozen, trained eagerly and through zenith::compile.
//
//   lora_finetune [--device cpu|cuda] [--dtype float32|bfloat16] [--steps N] [--size small|full] [--seed S]
//                 [--lr LR] [--csv PATH]
//
// The data is one fixed batch of token sequences drawn from a random sparse bigram table (each
// token has a few likely successors), so that there is something for the adapters to learn and the
// loss can go down. The compiled unit (CausalLmLoss) takes (tokens, labels) and returns the causal
// language-model cross-entropy: the loss is part of the compiled call. Every run starts from
// torch::manual_seed(seed), so runs with the same seed start from the same weights; AdamW (lr 2e-4,
// no weight decay, the Hugging Face Trainer's default) trains only the adapters.
//
// Five runs of --steps steps (default 50):
//   eager and Zenith with adapter dropout 0: the losses must agree (mean squared difference over the
//     steps <= 1e-6 in float32; under bfloat16 autocast <= (2^-8 x the mean eager loss)^2, see
//     loss_agreement_bound);
//   Zenith with adapter dropout 0.1, twice: every loss finite, the mean of the last 10 losses below
//     the mean of the first 10, and the two runs identical (no loss differs by more than 1e-7);
//   eager with dropout 0.1: for the CSV and the plot (it agrees with Zenith's only where the
//     compiled call draws its dropout masks from the generator in eager's order).
// --size small is LlamaConfig::small() at batch 8, 64 tokens (the CPU test); full is hidden 512,
// 8 layers, vocabulary 4096 at batch 8, 256 tokens (the GPU run). On CUDA, TF32 is off for cuBLAS
// and cuDNN, so that float32 is compared as float32. --dtype bfloat16 runs each forward and its loss
// in a bfloat16 autocast region (weights, adapters and AdamW stay float32), eager and Zenith alike.
//
// Writes the CSV step,eager_loss_nodrop,zenith_loss_nodrop,eager_loss_dropout,zenith_loss_dropout,
// zenith_loss_dropout_repeat (plot with plot_training.py) and exits 1 when a check fails.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "models/llama.h"
#include "models/lora.h"
#include "autocast_scope.h"
#include "plot_csv.h"
#include "zenith/compile.h"

namespace {

using zenith::models::Llama;
using zenith::models::LlamaConfig;
using zenith::models::LoraOptions;

// The compiled unit: the decoder and its next-token loss in one forward.
struct CausalLmLossImpl : torch::nn::Module {
  explicit CausalLmLossImpl(LlamaConfig config) { llama = register_module("llama", Llama(std::move(config))); }
  // tokens, labels: int64 [B, T], labels[:, t] the token that follows tokens[:, t] -> the mean
  // cross-entropy over all B * T positions, a scalar.
  torch::Tensor forward(torch::Tensor tokens, torch::Tensor labels) {
    const auto& config = llama->config();
    auto [past_k, past_v] = zenith::models::empty_cache(config, tokens.size(0), llama->lm_head->weight.options());
    torch::Tensor logits = std::get<0>(llama->forward(tokens, past_k, past_v));
    return torch::nn::functional::cross_entropy(logits.reshape({-1, config.vocab_size}), labels.reshape({-1}));
  }
  Llama llama{nullptr};
};
TORCH_MODULE(CausalLmLoss);

struct Settings {
  torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  bool bfloat16 = false;  // each forward under bfloat16 autocast
  int steps = 50;
  bool full = false;
  std::uint64_t seed = 0;
  double lr = 2e-4;
  std::string csv = "lora_finetune.csv";
};

Settings parse(int argc, char** argv) {
  Settings settings;
  if ((argc - 1) % 2 != 0) throw std::runtime_error(std::string("option ") + argv[argc - 1] + " needs a value");
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--device") {
      settings.device = torch::Device(value);
    } else if (flag == "--dtype") {
      if (value != "float32" && value != "bfloat16") throw std::runtime_error("--dtype is float32 or bfloat16");
      settings.bfloat16 = value == "bfloat16";
    } else if (flag == "--steps") {
      settings.steps = std::atoi(value.c_str());
      if (settings.steps < 2) throw std::runtime_error("--steps must be at least 2");
    } else if (flag == "--size") {
      if (value != "small" && value != "full") throw std::runtime_error("--size is small or full");
      settings.full = value == "full";
    } else if (flag == "--seed") {
      settings.seed = std::stoull(value);
    } else if (flag == "--lr") {
      settings.lr = std::stod(value);
      if (!(settings.lr > 0)) throw std::runtime_error("--lr must be positive");
    } else if (flag == "--csv") {
      settings.csv = value;
    } else {
      throw std::runtime_error("unknown option " + flag + " (use --device, --dtype, --steps, --size, --seed, --lr, --csv)");
    }
  }
  if (settings.device.is_cuda() && !torch::cuda::is_available()) {
    throw std::runtime_error("--device cuda, but this LibTorch sees no CUDA device");
  }
  return settings;
}

struct Shape {
  LlamaConfig config;
  std::int64_t batch = 8, length = 64;
};

Shape shape_for(bool full) {
  Shape shape;
  if (!full) {
    shape.config = LlamaConfig::small();
    return shape;
  }
  auto& c = shape.config;
  c.vocab_size = 4096;
  c.hidden_size = 512;
  c.num_layers = 8;
  c.num_heads = 8;
  c.num_kv_heads = 4;
  c.intermediate_size = 1376;
  c.max_position_embeddings = 512;
  shape.length = 256;
  return shape;
}

// The fixed batch: [batch, length + 1] tokens, each sequence a walk on a random sparse bigram table
// (4 successors per token, with random weights), drawn from its own generator so that it neither
// depends on nor disturbs the global one.
torch::Tensor bigram_sequences(const Shape& shape, std::uint64_t seed) {
  const std::int64_t vocab = shape.config.vocab_size, successors = 4;
  auto generator = at::detail::createCPUGenerator(seed);
  auto next = torch::randint(vocab, {vocab, successors}, generator, torch::kLong);
  auto weights = torch::softmax(2.0 * torch::randn({vocab, successors}, generator), -1);
  auto table = torch::zeros({vocab, vocab}).scatter_add_(1, next, weights);
  std::vector<torch::Tensor> columns{torch::randint(vocab, {shape.batch, 1}, generator, torch::kLong)};
  for (std::int64_t t = 0; t < shape.length; ++t) {
    columns.push_back(torch::multinomial(table.index_select(0, columns.back().squeeze(1)), 1, true, generator));
  }
  return torch::cat(columns, 1);
}

struct RunSpec {
  const char* name;
  bool compiled;
  double dropout;
};

struct RunResult {
  std::vector<double> losses;
  double seconds = 0;
  std::string zenith_calls;  // what the compiled module did, for the compiled runs
};

RunResult train(const Settings& settings, const Shape& shape, const torch::Tensor& sequences,
                const RunSpec& spec) {
  torch::manual_seed(settings.seed);  // the same base and adapter weights, and dropout masks, per seed
  LlamaConfig config = shape.config;
  config.lora = LoraOptions{/*rank=*/8, /*alpha=*/32.0, /*dropout=*/spec.dropout};
  CausalLmLoss model(config);
  zenith::models::mark_only_lora_trainable(*model);
  model->to(settings.device);
  model->train();
  torch::optim::AdamW optimizer(zenith::models::lora_parameters(*model),
                                torch::optim::AdamWOptions(settings.lr).weight_decay(0.0));
  // Only the compiled runs make a compiled module (each loads the backend plugins).
  std::optional<decltype(zenith::compile(model))> fast;
  if (spec.compiled) {
    zenith::CompileOptions options;
    options.name = "llama_lora_loss";
    fast.emplace(zenith::compile(model, options));
  }

  const auto tokens = sequences.narrow(1, 0, shape.length).to(settings.device);
  const auto labels = sequences.narrow(1, 1, shape.length).to(settings.device);
  RunResult result;
  const auto started = std::chrono::steady_clock::now();
  for (int step = 0; step < settings.steps; ++step) {
    optimizer.zero_grad();
    torch::Tensor loss;
    {
      zenith::examples::AutocastScope autocast(settings.device.type(), settings.bfloat16);
      loss = fast ? (*fast)(tokens, labels) : model->forward(tokens, labels);
    }
    loss.backward();
    optimizer.step();
    result.losses.push_back(loss.item<double>());
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (fast) {
    const auto stats = fast->stats();
    const auto report = fast->report();
    result.zenith_calls = std::to_string(settings.steps - stats.eager_calls) + " compiled, " +
                          std::to_string(stats.eager_calls) + " eager";
    if (report.signature.empty()) {
      result.zenith_calls += " (no signature compiled: every call ran eagerly, with Zenith disabled)";
    } else if (report.eager_fallback) {
      result.zenith_calls += " (the signature runs eagerly: " + report.fallback_reason + ")";
    }
  }
  return result;
}

double mean(std::vector<double>::const_iterator begin, std::vector<double>::const_iterator end) {
  return std::accumulate(begin, end, 0.0) / static_cast<double>(end - begin);
}

double mean_squared_difference(const std::vector<double>& a, const std::vector<double>& b) {
  double sum = 0;
  for (std::size_t i = 0; i < a.size(); ++i) sum += (a[i] - b[i]) * (a[i] - b[i]);
  return sum / static_cast<double>(a.size());
}

// The largest mean squared difference of the dropout-0 losses that passes. Float32: 1e-6, far
// above float32 rounding and far below what a wrong gradient does over 50 steps. Under bfloat16
// autocast the logits come out of bfloat16 products (8 significant bits) and eager rounds after
// every op where a fused kernel rounds once at its end, so two correct runs differ by rounding of
// that size: the bound is one bfloat16 ulp of the loss, (2^-8 x the mean eager loss)^2, for the
// mean of the squared differences.
double loss_agreement_bound(bool bfloat16, const std::vector<double>& eager_losses) {
  if (!bfloat16) return 1e-6;
  const double scale = std::ldexp(mean(eager_losses.begin(), eager_losses.end()), -8);
  return scale * scale;
}

double max_abs_difference(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

int run(const Settings& settings) {
  if (settings.device.is_cuda()) {
    at::globalContext().setAllowTF32CuDNN(false);
    at::globalContext().setAllowTF32CuBLAS(false);
  }
  const Shape shape = shape_for(settings.full);
  const auto& c = shape.config;
  std::printf("LoRA fine-tune: LLaMA hidden %lld, %lld layers, vocabulary %lld; LoRA rank 8, alpha 32 on q, k, v, o; "
              "one fixed batch of %lld x %lld tokens; AdamW lr %g, %d steps on %s, %s%s\n",
              static_cast<long long>(c.hidden_size), static_cast<long long>(c.num_layers),
              static_cast<long long>(c.vocab_size), static_cast<long long>(shape.batch),
              static_cast<long long>(shape.length), settings.lr,
              settings.steps, settings.device.str().c_str(), settings.bfloat16 ? "bfloat16 autocast" : "float32",
              settings.device.is_cuda() ? " (TF32 off)" : "");
  const auto sequences = bigram_sequences(shape, settings.seed + 1);

  const RunSpec specs[] = {{"eager, dropout 0", false, 0.0},
                           {"zenith, dropout 0", true, 0.0},
                           {"eager, dropout 0.1", false, 0.1},
                           {"zenith, dropout 0.1", true, 0.1},
                           {"zenith, dropout 0.1, again", true, 0.1}};
  std::vector<RunResult> runs;
  for (const auto& spec : specs) {
    runs.push_back(train(settings, shape, sequences, spec));
    const auto& r = runs.back();
    std::printf("  %-27s loss %.5f -> %.5f, %.1f ms/step%s%s\n", spec.name, r.losses.front(), r.losses.back(),
                1e3 * r.seconds / settings.steps, spec.compiled ? "; zenith calls: " : "", r.zenith_calls.c_str());
    std::fflush(stdout);
  }
  const auto& eager_nodrop = runs[0].losses;
  const auto& zenith_nodrop = runs[1].losses;
  const auto& eager_dropout = runs[2].losses;
  const auto& zenith_dropout = runs[3].losses;
  const auto& zenith_repeat = runs[4].losses;

  {
    if (const auto folder = std::filesystem::path(settings.csv).parent_path(); !folder.empty()) {
      std::filesystem::create_directories(folder);
    }
    std::ofstream csv(settings.csv);
    if (!csv) throw std::runtime_error("cannot write " + settings.csv);
    csv << "step,eager_loss_nodrop,zenith_loss_nodrop,eager_loss_dropout,zenith_loss_dropout,"
           "zenith_loss_dropout_repeat\n"
        << std::setprecision(17);
    for (int i = 0; i < settings.steps; ++i) {
      csv << i + 1 << ',' << eager_nodrop[i] << ',' << zenith_nodrop[i] << ',' << eager_dropout[i] << ','
          << zenith_dropout[i] << ',' << zenith_repeat[i] << '\n';
    }
  }
  std::printf("\nsummary\n  CSV: %s\n", settings.csv.c_str());

  int status = 0;
  char line[256];
  auto verdict = [&](bool pass, const char* what) {
    std::printf("  %s: %s\n", pass ? "PASS" : "FAIL", what);
    if (!pass) status = 1;
  };
  const double mse = mean_squared_difference(eager_nodrop, zenith_nodrop);
  const double bound = loss_agreement_bound(settings.bfloat16, eager_nodrop);
  std::snprintf(line, sizeof line, "dropout 0: eager and Zenith losses agree (mean squared difference %.3g <= %.3g)",
                mse, bound);
  verdict(mse <= bound, line);

  bool finite = true;
  for (const auto* losses : {&zenith_dropout, &zenith_repeat}) {
    for (double loss : *losses) finite = finite && std::isfinite(loss);
  }
  verdict(finite, "dropout 0.1: every Zenith loss is finite");
  const auto window = static_cast<std::ptrdiff_t>(std::min(10, settings.steps / 2));
  const double first = mean(zenith_dropout.begin(), zenith_dropout.begin() + window);
  const double last = mean(zenith_dropout.end() - window, zenith_dropout.end());
  std::snprintf(line, sizeof line, "dropout 0.1: the loss goes down (mean of the last %td %.5f < of the first %td %.5f)",
                window, last, window, first);
  verdict(finite && last < first, line);
  const double repeat = max_abs_difference(zenith_dropout, zenith_repeat);
  std::snprintf(line, sizeof line, "dropout 0.1: the same seed gives the same losses (largest difference %.3g <= 1e-7)",
                repeat);
  verdict(repeat <= 1e-7, line);
  std::printf("  (for information) dropout 0.1, eager against Zenith: largest loss difference %.3g\n",
              max_abs_difference(eager_dropout, zenith_dropout));

  zenith::examples::plot_csv(settings.csv);
  std::printf("RESULT: %s\n", status == 0 ? "LoRA fine-tune matches" : "LoRA fine-tune FAILED");
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const std::exception& error) {
    std::fprintf(stderr, "lora_finetune: %s\n", error.what());
    return 2;
  }
}
