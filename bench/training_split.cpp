// Where a training step's time goes: the forward (with the loss), the backward and the AdamW step
// of ResNet-50 (batch 32, 224x224) and of a 6-layer BERT-base (batch 32, sequence 128), eager and
// through zenith::compile, float32 or under bfloat16 autocast, timed apart (the device synchronized
// around each). The optimizer is the same code in both; it is timed too, since it reads the gradients
// each mode made. Prints one line per model and mode (with the memory allocated after a step), then
// Zenith's compile reports.
//   bench_training_split [--profile] [--kernels N] [--autocast]
//     --profile    also each mode's kernels over 5 whole steps (Kineto): how many, how long, and the
//                  GPU's idle time; --kernels N lists the N longest kernels (default 25)
//     --autocast   the forwards (and losses) in a CUDA bfloat16 autocast region, as the suite's
//                  bf16 training rows; the backward and the optimizer outside it
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>

#include "kernel_profile.h"
#include "suite/autocast_guard.h"
#include "models/bert.h"
#include "models/cnn.h"
#include "zenith/compile.h"

namespace {

using zenith::models::Bert;
using zenith::models::BertConfig;
using zenith::models::Cnn;
using zenith::models::CnnConfig;

struct CnnLossImpl : torch::nn::Module {
  explicit CnnLossImpl(const CnnConfig& config) : net(register_module("net", Cnn(config))) {}
  torch::Tensor forward(torch::Tensor images, torch::Tensor labels) {
    return torch::cross_entropy_loss(net->forward(images), labels);
  }
  Cnn net;
};
TORCH_MODULE(CnnLoss);

// Every position predicts a token through the tied word embedding, as the suite's training case.
struct BertLossImpl : torch::nn::Module {
  explicit BertLossImpl(const BertConfig& config)
      : bert(register_module("bert", Bert(config))), vocab(config.vocab_size) {}
  torch::Tensor forward(torch::Tensor ids, torch::Tensor mask, torch::Tensor labels) {
    auto logits = torch::matmul(bert->forward(ids, mask), bert->embeddings->word_embeddings->weight.t());
    return torch::cross_entropy_loss(logits.view({-1, vocab}), labels);
  }
  Bert bert;
  std::int64_t vocab;
};
TORCH_MODULE(BertLoss);

double synchronized_ms() {
  torch::cuda::synchronize();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string graphs_line(const zenith::CacheStats& stats) {
  return "\n  CUDA graphs: " + std::to_string(stats.graph_captures) + " captured, " + std::to_string(stats.graph_replays) +
         " replays, " + std::to_string(stats.graph_plain_runs) + " runs launch by launch, " +
         std::to_string(stats.graph_failures) + " failed captures";
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// Medians over 20 steps after 5 of warm-up (the first compiled call captures). With `profiles`,
// then 5 more steps under the profiler, whose summary goes there.
void time_steps(const char* name, const std::function<torch::Tensor()>& forward, torch::nn::Module& module,
                std::vector<std::string>* profiles, std::size_t kernels) {
  torch::optim::AdamW optimizer(module.parameters(), torch::optim::AdamWOptions(1e-4));
  std::vector<double> forward_ms, backward_ms, optimizer_ms;
  for (int step = 0; step < 25; ++step) {
    optimizer.zero_grad();
    const double start = synchronized_ms();
    auto loss = forward();
    const double after_forward = synchronized_ms();
    loss.backward();
    const double after_backward = synchronized_ms();
    optimizer.step();
    const double end = synchronized_ms();
    if (step < 5) continue;
    forward_ms.push_back(after_forward - start);
    backward_ms.push_back(after_backward - after_forward);
    optimizer_ms.push_back(end - after_backward);
  }
  const double f = median(forward_ms), b = median(backward_ms), o = median(optimizer_ms);
  // After a step: weights, gradients, optimizer state, and what the mode keeps (Zenith's CUDA graphs
  // keep their memory pools).
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(0);
  const double allocated_mb = static_cast<double>(stats.allocated_bytes[0].current) / (1 << 20);
  std::printf("| %s | %.2f | %.2f | %.2f | %.2f | %.0f |\n", name, f, b, o, f + b + o, allocated_mb);
  std::fflush(stdout);
  if (profiles == nullptr) return;
  const auto profile = zenith::bench::profile_kernels(
      [&] {
        optimizer.zero_grad();
        forward().backward();
        optimizer.step();
      },
      5, kernels);
  profiles->push_back(profile.to_markdown(name));
}

}  // namespace

int main(int argc, char** argv) {
  bool profile = false, autocast = false;
  std::size_t kernels = 25;
  for (int a = 1; a < argc; ++a) {
    if (std::strcmp(argv[a], "--profile") == 0) {
      profile = true;
    } else if (std::strcmp(argv[a], "--kernels") == 0 && a + 1 < argc && std::atoi(argv[a + 1]) > 0) {
      kernels = static_cast<std::size_t>(std::atoi(argv[++a]));
    } else if (std::strcmp(argv[a], "--autocast") == 0) {
      autocast = true;
    } else {
      std::fprintf(stderr, "bench_training_split: unknown argument %s\nusage: bench_training_split [--profile] [--kernels N] [--autocast]\n",
                   argv[a]);
      return 2;
    }
  }
  // Each forward runs in its own region, as a training loop's would.
  auto in_region = [autocast](const std::function<torch::Tensor()>& forward) -> std::function<torch::Tensor()> {
    if (!autocast) return forward;
    return [forward] {
      zenith::bench::AutocastGuard region(c10::DeviceType::CUDA, at::kBFloat16);
      return forward();
    };
  };
  std::vector<std::string> profiles;
  auto* kept = profile ? &profiles : nullptr;
  if (!torch::cuda::is_available()) {
    std::fprintf(stderr, "bench_training_split: needs a CUDA device\n");
    return 2;
  }
  const torch::Device device(torch::kCUDA);
  const auto longs = torch::TensorOptions().dtype(torch::kLong).device(device);
  std::vector<std::string> reports;
  std::printf("| model and mode | forward ms | backward ms | AdamW ms | sum | allocated MB after a step |\n"
              "| --- | --- | --- | --- | --- | --- |\n");
  {
    CnnLoss model(CnnConfig::resnet50());
    model->to(device);
    model->train();
    auto images = torch::randn({32, 3, 224, 224}, device);
    auto labels = torch::randint(1000, {32}, longs);
    time_steps("ResNet-50, eager", in_region([&] { return model->forward(images, labels); }), *model, kept, kernels);
    auto fast = zenith::compile(model);
    time_steps("ResNet-50, Zenith", in_region([&] { return fast(images, labels); }), *model, kept, kernels);
    reports.push_back(fast.report().to_string() + graphs_line(fast.stats()));
  }
  {
    auto config = BertConfig::base();
    config.num_layers = 6;
    config.dropout = 0;
    BertLoss model(config);
    model->to(device);
    model->train();
    auto ids = torch::randint(config.vocab_size, {32, 128}, longs);
    auto mask = torch::ones({32, 128}, longs);
    auto labels = torch::randint(config.vocab_size, {32 * 128}, longs);
    time_steps("BERT-base 6 layers, eager", in_region([&] { return model->forward(ids, mask, labels); }), *model,
               kept, kernels);
    auto fast = zenith::compile(model);
    time_steps("BERT-base 6 layers, Zenith", in_region([&] { return fast(ids, mask, labels); }), *model, kept, kernels);
    reports.push_back(fast.report().to_string() + graphs_line(fast.stats()));
  }
  for (const auto& report : reports) std::printf("\n%s\n", report.c_str());
  for (const auto& text : profiles) std::printf("\n%s\n", text.c_str());
  return 0;
}
