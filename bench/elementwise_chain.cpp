// Benchmark: y = gelu(x*a + b)*c over 2^26 elements, eager LibTorch against Zenith, with the
// device-to-device copy bandwidth measured in the same run as the yardstick. Effective bandwidth
// counts the bytes a fused kernel must move: four tensors read, one written.
//   bench_elementwise_chain [log2 elements, default 26]
// Prints one markdown table row per dtype and mode. CUDA events; warm-up first; median of 50.
#include <algorithm>
#include <cstdio>
#include <functional>
#include <vector>

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/torch.h>

#include "zenith/compile.h"

namespace {

double median_ms(const std::function<void()>& body, int repetitions = 50) {
  for (int i = 0; i < 10; ++i) body();
  std::vector<double> times;
  for (int i = 0; i < repetitions; ++i) {
    at::cuda::CUDAEvent start(cudaEventDefault), stop(cudaEventDefault);
    start.record();
    body();
    stop.record();
    stop.synchronize();
    times.push_back(start.elapsed_time(stop));
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

at::Tensor chain(at::Tensor x, at::Tensor a, at::Tensor b, at::Tensor c) { return torch::gelu(x * a + b) * c; }

}  // namespace

int main(int argc, char** argv) {
  if (!torch::cuda::is_available()) {
    std::fprintf(stderr, "bench_elementwise_chain needs a CUDA device\n");
    return 2;
  }
  const int log2n = argc > 1 ? std::atoi(argv[1]) : 26;
  const std::int64_t n = 1LL << log2n;
  torch::NoGradGuard no_grad;
  torch::manual_seed(0);
  std::printf("| dtype | mode | median ms | effective GB/s | %% of copy |\n| --- | --- | --- | --- | --- |\n");
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    auto options = torch::TensorOptions().dtype(dtype).device(torch::kCUDA);
    auto x = torch::randn({n}, options), a = torch::randn({n}, options);
    auto b = torch::randn({n}, options), c = torch::randn({n}, options);
    auto copy_target = torch::empty_like(x);
    const double element = static_cast<double>(x.element_size());
    double copy_ms = median_ms([&] { copy_target.copy_(x); });
    double copy_gbs = 2 * n * element / copy_ms / 1e6;
    zenith::CompileOptions compile_options;
    compile_options.fallback_to_eager = false;
    auto fast = zenith::compile(&chain, compile_options);
    fast(x, a, b, c);  // the first call captures and returns the trace's own (eager) result
    auto expected = chain(x, a, b, c).to(at::kFloat);
    auto got = fast(x, a, b, c).to(at::kFloat);
    double error = (got - expected).abs().max().item<double>() / expected.abs().max().item<double>();
    double eager_ms = median_ms([&] { chain(x, a, b, c); });
    double zenith_ms = median_ms([&] { fast(x, a, b, c); });
    auto row = [&](const char* mode, double ms) {
      double gbs = 5 * n * element / ms / 1e6;
      std::printf("| %s | %s | %.3f | %.0f | %.0f%% |\n", c10::toString(dtype), mode, ms, gbs, 100 * gbs / copy_gbs);
    };
    std::printf("| %s | device copy | %.3f | %.0f | 100%% |\n", c10::toString(dtype), copy_ms, copy_gbs);
    row("eager", eager_ms);
    row("zenith", zenith_ms);
    std::printf("| %s | zenith vs eager max rel. error | %.2e | | |\n", c10::toString(dtype), error);
    std::printf("| %s | zenith plan | %s | | |\n", c10::toString(dtype),
                fast.report().nodes_per_backend.count("jit_cuda") ? "one jit_cuda kernel" : "NOT on jit_cuda");
  }
  return 0;
}
