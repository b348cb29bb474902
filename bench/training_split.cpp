// Where a training step's time goes: the forward (with the loss) and the backward of ResNet-50
// (batch 32, 224x224) and of a 6-layer BERT-base (batch 32, sequence 128), eager and through
// zenith::compile, float32, timed apart (the device synchronized around each). No optimizer step:
// it is the same code in both. Prints one line per model and mode, then Zenith's compile reports.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <vector>

#include <torch/torch.h>

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

// Medians over 20 steps after 5 of warm-up (the first compiled call captures).
void time_steps(const char* name, const std::function<torch::Tensor()>& forward, torch::nn::Module& module) {
  std::vector<double> forward_ms, backward_ms;
  for (int step = 0; step < 25; ++step) {
    module.zero_grad();
    const double start = synchronized_ms();
    auto loss = forward();
    const double middle = synchronized_ms();
    loss.backward();
    const double end = synchronized_ms();
    if (step < 5) continue;
    forward_ms.push_back(middle - start);
    backward_ms.push_back(end - middle);
  }
  std::sort(forward_ms.begin(), forward_ms.end());
  std::sort(backward_ms.begin(), backward_ms.end());
  std::printf("| %s | %.2f | %.2f | %.2f |\n", name, forward_ms[forward_ms.size() / 2],
              backward_ms[backward_ms.size() / 2], forward_ms[forward_ms.size() / 2] + backward_ms[backward_ms.size() / 2]);
}

}  // namespace

int main() {
  if (!torch::cuda::is_available()) {
    std::fprintf(stderr, "bench_training_split: needs a CUDA device\n");
    return 2;
  }
  const torch::Device device(torch::kCUDA);
  const auto longs = torch::TensorOptions().dtype(torch::kLong).device(device);
  std::vector<std::string> reports;
  std::printf("| model and mode | forward ms | backward ms | sum |\n| --- | --- | --- | --- |\n");
  {
    CnnLoss model(CnnConfig::resnet50());
    model->to(device);
    model->train();
    auto images = torch::randn({32, 3, 224, 224}, device);
    auto labels = torch::randint(1000, {32}, longs);
    time_steps("ResNet-50, eager", [&] { return model->forward(images, labels); }, *model);
    auto fast = zenith::compile(model);
    time_steps("ResNet-50, Zenith", [&] { return fast(images, labels); }, *model);
    reports.push_back(fast.report().to_string());
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
    time_steps("BERT-base 6 layers, eager", [&] { return model->forward(ids, mask, labels); }, *model);
    auto fast = zenith::compile(model);
    time_steps("BERT-base 6 layers, Zenith", [&] { return fast(ids, mask, labels); }, *model);
    reports.push_back(fast.report().to_string());
  }
  for (const auto& report : reports) std::printf("\n%s\n", report.c_str());
  return 0;
}
