// Benchmark: does a new sequence length cost new kernels? Generated kernels take sizes as
// arguments, so after the first length every later one should find all of its kernels in the
// cache: zero NVRTC compiles. Each model runs in float16 on CUDA at 50 distinct lengths drawn with
// a fixed seed (in drawing order, so shorter and longer ones alternate); each length is a new
// signature, so its first call captures and compiles a plan, and later calls replay it.
//   BERT-base encoder    batch 1, sequence 8..512 (its position table's size)
//   LLaMA small decoder  batch 1, prompt 8..1024 (position limit raised to 1024; no KV cache)
//   MLP small            batch 1..1024 (no sequence: the batch varies instead)
//   bench_shape_sweep [lengths per model, default 50] [seed, default 7]
// Prints a markdown table and plain lines; exits 1 when any NVRTC compile happened after a model's
// first length (or the sweep could not tell), 2 without a CUDA device.
//
// NVRTC compiles are counted as new files in a kernel cache folder of this run's own (one per
// compiled key). The report's kernels_compiled counts every backend's groups, including the
// PyTorch GPU plugin's, which compile nothing; it is printed beside, never used for the verdict.
// The models share one process and one cache, in the order above, so a later model's first length
// may find kernels an earlier model compiled.
#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <torch/torch.h>

#include "models/bert.h"
#include "models/llama.h"
#include "models/mlp.h"
#include "fresh_cache_folder.h"
#include "report_errors.h"
#include "zenith/compile.h"

namespace {

using zenith::bench::FreshFolder;
using zenith::bench::kernel_files;

// --- Measuring ----------------------------------------------------------------------------------

double wall_ms(const std::function<void()>& body) {
  torch::cuda::synchronize();
  auto start = std::chrono::steady_clock::now();
  body();
  torch::cuda::synchronize();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

// Median of a few calls: one call at a new shape also pays allocator growth and library heuristics.
double median_call_ms(const std::function<void()>& body, int calls = 3) {
  std::vector<double> times;
  for (int i = 0; i < calls; ++i) times.push_back(wall_ms(body));
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// Distinct values in [low, high], in drawing order.
std::vector<std::int64_t> draw_lengths(std::int64_t low, std::int64_t high, std::size_t count, unsigned seed) {
  count = std::min<std::size_t>(count, static_cast<std::size_t>(high - low + 1));
  std::mt19937 generator(seed);
  std::uniform_int_distribution<std::int64_t> pick(low, high);
  std::set<std::int64_t> seen;
  std::vector<std::int64_t> lengths;
  while (lengths.size() < count) {
    auto length = pick(generator);
    if (seen.insert(length).second) lengths.push_back(length);
  }
  return lengths;
}

struct Sample {
  std::int64_t length = 0;
  std::int64_t nvrtc = 0;     // new kernel files: NVRTC compiles
  std::int64_t compiled = 0;  // the report's kernels_compiled (every backend)
  std::int64_t hits = 0;      // the report's kernel_cache_hits (the JIT backend's cache)
  std::int64_t jit_nodes = 0;
  bool fallback = false;
  double compile_ms = 0;  // the report's total_ms
  double replay_ms = 0;   // a call of the compiled plan, median of three
  double eager_ms = 0;    // an eager call, median of three
};

// `fast` and `eager` take the tuple `inputs(length)` returns.
template <typename Compiled, typename Eager, typename Inputs>
std::vector<Sample> sweep(Compiled& fast, Eager eager, Inputs inputs, const std::vector<std::int64_t>& lengths,
                          const std::string& folder) {
  std::vector<Sample> samples;
  for (auto length : lengths) {
    auto args = inputs(length);
    Sample s;
    s.length = length;
    const auto before = kernel_files(folder);
    std::apply(fast, args);  // captures, compiles, returns the trace's own result
    s.nvrtc = kernel_files(folder) - before;
    const auto report = fast.report();
    s.compiled = report.kernels_compiled;
    s.hits = report.kernel_cache_hits;
    s.jit_nodes = report.nodes_per_backend.count("jit_cuda") ? report.nodes_per_backend.at("jit_cuda") : 0;
    s.fallback = report.eager_fallback;
    s.compile_ms = report.total_ms;
    s.replay_ms = median_call_ms([&] { std::apply(fast, args); });
    s.eager_ms = median_call_ms([&] { std::apply(eager, args); });
    samples.push_back(s);
  }
  return samples;
}

zenith::CompileOptions strict(const std::string& name) {
  zenith::CompileOptions options;
  options.name = name;
  options.fallback_to_eager = false;
  return options;
}

int run(int argc, char** argv) {
  if (!torch::cuda::is_available()) {
    std::fprintf(stderr, "bench_shape_sweep needs a CUDA device\n");
    return 2;
  }
  const std::size_t count = argc > 1 ? static_cast<std::size_t>(std::max(2, std::atoi(argv[1]))) : 50;
  const unsigned seed = argc > 2 ? static_cast<unsigned>(std::atoi(argv[2])) : 7;
  // The plugin reads ZENITH_CACHE_DIR once, when the first compile loads it: a folder of this run's
  // own, so that the first length starts cold and new files are this run's compiles.
  const FreshFolder fresh("zenith-bench-sweep");
  const std::string& folder = fresh.path;
  setenv("ZENITH_CACHE_DIR", folder.c_str(), 1);
  torch::NoGradGuard no_grad;
  torch::manual_seed(0);
  const auto half = torch::TensorOptions().dtype(torch::kHalf).device(torch::kCUDA);
  const auto tokens = torch::TensorOptions().dtype(torch::kLong).device(torch::kCUDA);

  struct Result {
    std::string model;
    std::string range;
    std::vector<Sample> samples;
  };
  std::vector<Result> results;

  {
    auto config = zenith::models::BertConfig::base();
    zenith::models::Bert model(config);
    model->eval();
    model->to(torch::kCUDA, torch::kHalf);
    auto fast = zenith::compile(model, strict("bert-base"));
    auto lengths = draw_lengths(8, config.max_position_embeddings, count, seed);
    auto inputs = [&](std::int64_t length) {
      return std::make_tuple(torch::randint(config.vocab_size, {1, length}, tokens), torch::ones({1, length}, tokens));
    };
    auto eager = [&](at::Tensor ids, at::Tensor mask) { return model->forward(ids, mask); };
    results.push_back({"BERT-base f16, batch 1", "sequence 8.." + std::to_string(config.max_position_embeddings),
                       sweep(fast, eager, inputs, lengths, folder)});
  }
  {
    auto config = zenith::models::LlamaConfig::small();
    config.max_position_embeddings = 1024;
    zenith::models::Llama model(config);
    model->eval();
    model->to(torch::kCUDA, torch::kHalf);
    auto fast = zenith::compile(model, strict("llama-small"));
    auto [k0, v0] = zenith::models::empty_cache(config, 1, half);
    auto lengths = draw_lengths(8, config.max_position_embeddings, count, seed + 1);
    auto inputs = [&, k0 = k0, v0 = v0](std::int64_t length) {
      return std::make_tuple(torch::randint(config.vocab_size, {1, length}, tokens), k0, v0);
    };
    auto eager = [&](at::Tensor t, at::Tensor k, at::Tensor v) { return model->forward(t, k, v); };
    results.push_back({"LLaMA small f16, batch 1, prompt", "sequence 8.." + std::to_string(config.max_position_embeddings),
                       sweep(fast, eager, inputs, lengths, folder)});
  }
  {
    auto config = zenith::models::MlpConfig::small();
    zenith::models::Mlp model(config);
    model->to(torch::kCUDA, torch::kHalf);
    auto fast = zenith::compile(model, strict("mlp-small"));
    auto lengths = draw_lengths(1, 1024, count, seed + 2);
    auto inputs = [&](std::int64_t batch) { return std::make_tuple(torch::randn({batch, config.in}, half)); };
    auto eager = [&](at::Tensor x) { return model->forward(x); };
    results.push_back({"MLP small f16", "batch 1..1024", sweep(fast, eager, inputs, lengths, folder)});
  }
  const auto files = kernel_files(folder);

  int status = 0;
  std::string notes;  // plain lines, printed after the table so that they do not split it
  std::printf("| model | lengths | NVRTC compiles, first length | NVRTC compiles, other %zu | cache hits, first / others | "
              "median compile ms, new length | median call ms, zenith | median call ms, eager |\n",
              count - 1);
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- |\n");
  for (const auto& r : results) {
    const auto& first = r.samples.front();
    std::int64_t later_nvrtc = 0, later_hits = 0, later_compiled = 0;
    std::vector<double> compile_ms, replay_ms, eager_ms;
    for (std::size_t i = 0; i < r.samples.size(); ++i) {
      const auto& s = r.samples[i];
      replay_ms.push_back(s.replay_ms);
      eager_ms.push_back(s.eager_ms);
      if (i == 0) continue;
      later_nvrtc += s.nvrtc;
      later_hits += s.hits;
      later_compiled += s.compiled;
      compile_ms.push_back(s.compile_ms);
    }
    std::printf("| %s | %zu, %s | %lld | %lld | %lld / %lld | %.1f | %.3f | %.3f |\n", r.model.c_str(), r.samples.size(),
                r.range.c_str(), static_cast<long long>(first.nvrtc), static_cast<long long>(later_nvrtc),
                static_cast<long long>(first.hits), static_cast<long long>(later_hits), median(compile_ms),
                median(replay_ms), median(eager_ms));
    notes += r.model + ": first length " + std::to_string(first.length) + "; report kernels_compiled (every backend) first " +
             std::to_string(first.compiled) + ", others " + std::to_string(later_compiled) + "\n";
    // A sweep that never reached the JIT backend, or whose compiles left no files, proves nothing.
    if (first.jit_nodes == 0) {
      std::fprintf(stderr, "bench_shape_sweep: %s: no node ran on jit_cuda\n", r.model.c_str());
      status = 1;
    } else if (first.nvrtc + first.hits == 0) {
      std::fprintf(stderr, "bench_shape_sweep: %s: jit_cuda ran nodes but neither compiled nor found a kernel\n",
                   r.model.c_str());
      status = 1;
    }
    for (const auto& s : r.samples) {
      if (s.fallback) {
        std::fprintf(stderr, "bench_shape_sweep: %s: length %lld ran eagerly\n", r.model.c_str(), static_cast<long long>(s.length));
        status = 1;
      }
      if (&s != &first && s.nvrtc > 0) {
        notes += r.model + ": length " + std::to_string(s.length) + " compiled " + std::to_string(s.nvrtc) +
                 " new kernels (" + std::to_string(s.hits) + " from the cache)\n";
        status = 1;
      }
    }
  }
  std::printf("\n%skernel files in the cache folder at the end: %lld\n", notes.c_str(), static_cast<long long>(files));
  if (files == 0) {
    std::fprintf(stderr, "bench_shape_sweep: the kernel cache wrote no file, so NVRTC compiles could not be counted\n");
    status = 1;
  }
  if (status != 0) std::fprintf(stderr, "bench_shape_sweep: FAILED (see above)\n");
  return status;
}

}  // namespace

int main(int argc, char** argv) { return zenith::bench::run_reporting_errors(argc, argv, run); }
