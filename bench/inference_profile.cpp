// Where an inference call's device time goes: the zoo's BERT-base (128 tokens), ResNet-50
// (224x224) and the TinyLlama-shaped decoder's static-cache decode step (one token after 128, a
// cache of 256 slots) called eagerly and through Zenith (its plan replayed as a CUDA graph), each
// profiled over 20 calls with Kineto (kernel_profile.h): kernels per call, device time against
// wall time, and the kernels that take longest. Random weights.
// With --model linears: the decoder's weight matrices one at a time (a bias-free linear over one
// token), each call's kernel time with L2 flushed before it (its weight read from device memory,
// as in a decode step) and the weight bytes it streams per second, eager (cuBLAS) against Zenith
// (its matrix-vector kernel, or cuBLASLt with ZENITH_MATRIX_VECTOR=0).
//   bench_inference_profile [--dtype float32|float16] [--batch N] [--model bert|resnet|llama|linears]
// Defaults: both dtypes, batch 1, BERT and ResNet-50 (the decoder and its linears only when named);
// float16 ResNet-50 is channels-last. Prints Markdown. Needs a CUDA device.
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <torch/torch.h>

#include "kernel_profile.h"
#include "models/bert.h"
#include "models/cnn.h"
#include "models/llama.h"
#include "zenith/compile.h"

namespace {

constexpr int kWarmup = 10;
constexpr int kProfiled = 20;
constexpr std::size_t kTopKernels = 12;

// Warms `call` up (the compiled one captures, runs, records its graph), then profiles it.
void profile(const std::string& title, const std::function<torch::Tensor()>& call) {
  torch::NoGradGuard no_grad;
  for (int i = 0; i < kWarmup; ++i) call();
  torch::cuda::synchronize();
  const auto result = zenith::bench::profile_kernels([&] { call(); }, kProfiled, kTopKernels);
  std::printf("%s\n", result.to_markdown(title).c_str());
}

void to_channels_last(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  for (auto& p : module.parameters()) {
    if (p.dim() == 4) p.set_data(p.contiguous(at::MemoryFormat::ChannelsLast));
  }
}

void bert(c10::ScalarType dtype, std::int64_t batch) {
  using zenith::models::Bert;
  torch::manual_seed(1);
  const auto config = zenith::models::BertConfig::base();
  Bert model(config);
  model->eval();
  model->to(torch::kCUDA, dtype);
  const auto tokens = torch::TensorOptions().dtype(torch::kLong).device(torch::kCUDA);
  auto ids = torch::randint(config.vocab_size, {batch, 128}, tokens);
  auto mask = torch::ones({batch, 128}, tokens);
  const std::string name = "BERT-base b" + std::to_string(batch) + " " + c10::toString(dtype);
  profile(name + ", eager", [&] { return model->forward(ids, mask); });
  auto fast = zenith::compile(model);
  profile(name + ", Zenith", [&] { return fast(ids, mask); });
}

void resnet(c10::ScalarType dtype, std::int64_t batch) {
  using zenith::models::Cnn;
  torch::manual_seed(2);
  const auto config = zenith::models::CnnConfig::resnet50();
  Cnn model(config);
  model->eval();
  model->to(torch::kCUDA, dtype);
  const bool channels_last = dtype == at::kHalf;
  if (channels_last) to_channels_last(*model);
  auto images =
      torch::randn({batch, config.in_channels, 224, 224}, torch::TensorOptions().dtype(dtype).device(torch::kCUDA));
  if (channels_last) images = images.contiguous(at::MemoryFormat::ChannelsLast);
  const std::string name = "ResNet-50 b" + std::to_string(batch) + " " + c10::toString(dtype) +
                           (channels_last ? " channels-last" : "");
  profile(name + ", eager", [&] { return model->forward(images); });
  auto fast = zenith::compile(model);
  profile(name + ", Zenith", [&] { return fast(images); });
}

// One decode step at position 128 of a 256-slot static cache, the same token and position at every
// call (the step's work does not depend on them). The cache is written at that position by every
// call, as a generation writes each position once.
void llama_decode(c10::ScalarType dtype, std::int64_t batch) {
  using zenith::models::Llama;
  torch::manual_seed(3);
  const auto config = zenith::models::LlamaConfig::tinyllama();
  Llama llama(config);
  llama->eval();
  llama->to(torch::kCUDA, dtype);
  zenith::models::LlamaStaticCache model(llama);
  const auto longs = torch::TensorOptions().dtype(torch::kLong).device(torch::kCUDA);
  // Named, not a structured binding: C++17 lambdas cannot capture one (Clang refuses).
  auto cache = zenith::models::static_cache(config, batch, 256, torch::TensorOptions().dtype(dtype).device(torch::kCUDA));
  auto& k = std::get<0>(cache);
  auto& v = std::get<1>(cache);
  auto token = torch::randint(config.vocab_size, {batch, 1}, longs);
  auto position = torch::full({1}, 128, longs);
  const std::string name = "TinyLlama-shaped decode step b" + std::to_string(batch) + " " + c10::toString(dtype);
  profile(name + ", eager", [&] { return model->forward(token, position, k, v); });
  auto fast = zenith::compile(model);
  profile(name + ", Zenith", [&] { return fast(token, position, k, v); });
}

// Bytes written before each call of a product, twice the H200's 50 MB L2 and more than any other
// card's: the call then reads its weight from device memory, as in a decode step, where every
// other weight has passed through L2 since. Repeated without it, a weight that fits L2 is read
// from there: cuBLAS took 4.7 us for the 8.4 MB o projection so, where the decode step's q-k-v
// and o products took 5.8 us on average (H200, docs/performance.md, 2026-11-28).
constexpr std::size_t kL2FlushBytes = std::size_t{256} << 20;

// Kernel time of one call of `call`, averaged over the profiled calls, each after a memset of
// `flush` that evicts L2. Memsets and copies are left out: the flush's own, and the copies of
// inputs into a CUDA graph's buffers, which are no product's time.
double kernel_ms_per_call(const std::function<torch::Tensor()>& call, const torch::Tensor& flush) {
  torch::NoGradGuard no_grad;
  auto cold_call = [&] {
    auto stream = c10::cuda::getCurrentCUDAStream();
    C10_CUDA_CHECK(cudaMemsetAsync(flush.data_ptr(), 0, flush.nbytes(), stream.stream()));
    call();
  };
  for (int i = 0; i < kWarmup; ++i) cold_call();
  torch::cuda::synchronize();
  const auto profile = zenith::bench::profile_kernels(cold_call, kProfiled, 1);
  return profile.device_ms - profile.memset_ms - profile.copy_ms;
}

void llama_linears(c10::ScalarType dtype, std::int64_t batch) {
  const auto config = zenith::models::LlamaConfig::tinyllama();
  const std::int64_t kv = config.num_kv_heads * config.head_dim();
  const std::vector<std::pair<std::int64_t, std::int64_t>> shapes = {  // (out, in) features
      {config.hidden_size, config.hidden_size},       {kv, config.hidden_size},
      {config.intermediate_size, config.hidden_size}, {config.hidden_size, config.intermediate_size},
      {config.vocab_size, config.hidden_size}};
  auto flush = torch::empty({static_cast<std::int64_t>(kL2FlushBytes)},
                            torch::TensorOptions().dtype(torch::kByte).device(torch::kCUDA));
  std::printf("### The decoder's linears, one token (batch %lld, %s): kernel time per call, L2 flushed before each\n\n",
              static_cast<long long>(batch), c10::toString(dtype));
  std::printf("| out x in | weight MB | eager ms | eager GB/s | Zenith ms | Zenith GB/s |\n| --- | --- | --- | --- | --- | --- |\n");
  for (const auto& [out, in] : shapes) {
    torch::manual_seed(4);
    torch::nn::Linear linear(torch::nn::LinearOptions(in, out).bias(false));
    linear->to(torch::kCUDA, dtype);
    auto x = torch::randn({batch, 1, in}, torch::TensorOptions().dtype(dtype).device(torch::kCUDA));
    const double eager = kernel_ms_per_call([&] { return linear->forward(x); }, flush);
    auto fast = zenith::compile(linear);
    const double zenith = kernel_ms_per_call([&] { return fast(x); }, flush);
    const double bytes = static_cast<double>(linear->weight.nbytes());
    std::printf("| %lld x %lld | %.1f | %.4f | %.0f | %.4f | %.0f |\n", static_cast<long long>(out),
                static_cast<long long>(in), bytes / 1e6, eager, bytes / eager / 1e6, zenith, bytes / zenith / 1e6);
  }
  std::printf("\n");
}

}  // namespace

int usage() {
  std::fprintf(stderr, "usage: bench_inference_profile [--dtype float32|float16] [--batch N] [--model bert|resnet|llama|linears]\n");
  return 2;
}

int main(int argc, char** argv) {
  if (!torch::cuda::is_available()) {
    std::fprintf(stderr, "bench_inference_profile: no CUDA device\n");
    return 1;
  }
  std::vector<c10::ScalarType> dtypes = {at::kFloat, at::kHalf};
  std::int64_t batch = 1;
  std::string model;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--dtype" && (value == "float32" || value == "float16")) {
      dtypes = {value == "float32" ? at::kFloat : at::kHalf};
    } else if (flag == "--batch" && std::atoll(value.c_str()) > 0) {
      batch = std::atoll(value.c_str());
    } else if (flag == "--model" && (value == "bert" || value == "resnet" || value == "llama" || value == "linears")) {
      model = value;
    } else {
      return usage();
    }
  }
  if (argc % 2 == 0) return usage();
  try {
    for (auto dtype : dtypes) {
      if (model.empty() || model == "bert") bert(dtype, batch);
      if (model.empty() || model == "resnet") resnet(dtype, batch);
      if (model == "llama") llama_decode(dtype, batch);
      if (model == "linears") llama_linears(dtype, batch);
    }
  } catch (const std::exception& error) {
    std::fprintf(stderr, "bench_inference_profile: %s\n", error.what());
    return 1;
  }
  return 0;
}
