// Benchmark: what does a new sequence length cost? Each model runs in float16 on CUDA at 50
// distinct lengths drawn with a fixed seed (in drawing order, so shorter and longer ones
// alternate), twice: with dynamic shapes off, where each length is a new signature that captures
// and plans again (kernels come from the cache: generated kernels take sizes as arguments), and in
// the default automatic mode, where the second length makes the sequence symbolic and every later
// length is served by instantiating that plan, without capture or compile.
//   BERT-base encoder    batch 1, sequence 8..512 (its position table's size)
//   LLaMA small decoder  batch 1, prompt 8..1024 (position limit raised to 1024; no KV cache)
//   MLP small            batch 2..1024 (no sequence: the batch varies instead)
//   bench_shape_sweep [lengths per model, default 50] [seed, default 7]
// Prints a markdown table and plain lines; exits 1 when an NVRTC compile happened after a model's
// first length with dynamic shapes off, or after its second in automatic mode (where the second
// fits the symbolic plan, whose kernels may differ: size-dependent nodes are no longer folded), or
// when automatic mode recaptured after its second length; 2 without a CUDA device.
//
// The host cost of a new length is the compile report's total_ms for a capture, and the growth of
// CacheStats::instantiation_ms for an instantiation. NVRTC compiles are counted as new files in a
// kernel cache folder of this run's own (one per compiled key). The models share one process and
// one cache, in the order above, so a later model's first length may find kernels an earlier model
// compiled.
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
  bool captured = false;      // a capture (a miss), else an instantiation or a hit
  bool fallback = false;
  std::int64_t jit_nodes = 0;
  double new_length_ms = 0;   // host time of the new length: capture and plan, or instantiation
  double replay_ms = 0;       // a call of the compiled plan, median of three
  double eager_ms = 0;        // an eager call, median of three
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
    const auto files_before = kernel_files(folder);
    const auto before = fast.stats();
    std::apply(fast, args);  // captures or instantiates; a capture returns the trace's own result
    const auto after = fast.stats();
    s.nvrtc = kernel_files(folder) - files_before;
    s.captured = after.misses > before.misses;
    if (s.captured) {
      const auto report = fast.report();
      s.new_length_ms = report.total_ms;
      s.fallback = report.eager_fallback;
      s.jit_nodes = report.nodes_per_backend.count("jit_cuda") ? report.nodes_per_backend.at("jit_cuda") : 0;
    } else {
      s.new_length_ms = after.instantiation_ms - before.instantiation_ms;
    }
    s.replay_ms = median_call_ms([&] { std::apply(fast, args); });
    s.eager_ms = median_call_ms([&] { std::apply(eager, args); });
    samples.push_back(s);
  }
  return samples;
}

zenith::CompileOptions strict(const std::string& name, zenith::DynamicShapes mode) {
  zenith::CompileOptions options;
  options.name = name;
  options.fallback_to_eager = false;
  options.dynamic_shapes = mode;
  return options;
}

const char* mode_name(zenith::DynamicShapes mode) { return mode == zenith::DynamicShapes::Off ? "off" : "auto"; }

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
    zenith::DynamicShapes mode;
    std::vector<Sample> samples;
    std::int64_t symbolic_plans = 0;
  };
  std::vector<Result> results;
  for (auto mode : {zenith::DynamicShapes::Off, zenith::DynamicShapes::Auto}) {

  {
    auto config = zenith::models::BertConfig::base();
    zenith::models::Bert model(config);
    model->eval();
    model->to(torch::kCUDA, torch::kHalf);
    auto fast = zenith::compile(model, strict("bert-base", mode));
    auto lengths = draw_lengths(8, config.max_position_embeddings, count, seed);
    auto inputs = [&](std::int64_t length) {
      return std::make_tuple(torch::randint(config.vocab_size, {1, length}, tokens), torch::ones({1, length}, tokens));
    };
    auto eager = [&](at::Tensor ids, at::Tensor mask) { return model->forward(ids, mask); };
    results.push_back({"BERT-base f16, batch 1", "sequence 8.." + std::to_string(config.max_position_embeddings), mode,
                       sweep(fast, eager, inputs, lengths, folder), 0});
    results.back().symbolic_plans = fast.stats().symbolic_plans;
  }
  {
    auto config = zenith::models::LlamaConfig::small();
    config.max_position_embeddings = 1024;
    zenith::models::Llama model(config);
    model->eval();
    model->to(torch::kCUDA, torch::kHalf);
    auto fast = zenith::compile(model, strict("llama-small", mode));
    auto [k0, v0] = zenith::models::empty_cache(config, 1, half);
    auto lengths = draw_lengths(8, config.max_position_embeddings, count, seed + 1);
    auto inputs = [&, k0 = k0, v0 = v0](std::int64_t length) {
      return std::make_tuple(torch::randint(config.vocab_size, {1, length}, tokens), k0, v0);
    };
    auto eager = [&](at::Tensor t, at::Tensor k, at::Tensor v) { return model->forward(t, k, v); };
    results.push_back({"LLaMA small f16, batch 1, prompt", "sequence 8.." + std::to_string(config.max_position_embeddings),
                       mode, sweep(fast, eager, inputs, lengths, folder), 0});
    results.back().symbolic_plans = fast.stats().symbolic_plans;
  }
  {
    auto config = zenith::models::MlpConfig::small();
    zenith::models::Mlp model(config);
    model->to(torch::kCUDA, torch::kHalf);
    auto fast = zenith::compile(model, strict("mlp-small", mode));
    // Batch 1 broadcasts differently and is captured on its own: the sweep starts at 2.
    auto lengths = draw_lengths(2, 1024, count, seed + 2);
    auto inputs = [&](std::int64_t batch) { return std::make_tuple(torch::randn({batch, config.in}, half)); };
    auto eager = [&](at::Tensor x) { return model->forward(x); };
    results.push_back({"MLP small f16", "batch 2..1024", mode, sweep(fast, eager, inputs, lengths, folder), 0});
    results.back().symbolic_plans = fast.stats().symbolic_plans;
  }
  }
  const auto files = kernel_files(folder);

  int status = 0;
  std::string notes;  // plain lines, printed after the table so that they do not split it
  std::printf("| model | dynamic | lengths | NVRTC compiles, first length | NVRTC compiles, later (auto: after the "
              "second) | captures after the second length | symbolic plans | new length, host ms: median / max (after the second) | median call ms, "
              "zenith | median call ms, eager |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  for (const auto& r : results) {
    const auto& first = r.samples.front();
    std::int64_t later_nvrtc = 0, late_captures = 0;
    std::vector<double> new_length_ms, replay_ms, eager_ms;
    for (std::size_t i = 0; i < r.samples.size(); ++i) {
      const auto& s = r.samples[i];
      replay_ms.push_back(s.replay_ms);
      eager_ms.push_back(s.eager_ms);
      if (i >= (r.mode == zenith::DynamicShapes::Auto ? 2u : 1u)) later_nvrtc += s.nvrtc;
      if (i < 2) continue;  // the first length captures; in automatic mode the second one probes
      late_captures += s.captured;
      new_length_ms.push_back(s.new_length_ms);
    }
    std::printf("| %s | %s | %zu, %s | %lld | %lld | %lld | %lld | %.3f / %.3f | %.3f | %.3f |\n", r.model.c_str(),
                mode_name(r.mode), r.samples.size(), r.range.c_str(), static_cast<long long>(first.nvrtc),
                static_cast<long long>(later_nvrtc), static_cast<long long>(late_captures),
                static_cast<long long>(r.symbolic_plans), median(new_length_ms),
                *std::max_element(new_length_ms.begin(), new_length_ms.end()), median(replay_ms), median(eager_ms));
    notes += r.model + " (" + mode_name(r.mode) + "): first length " + std::to_string(first.length) + ", " +
             std::to_string(first.new_length_ms) + " ms; second length " + std::to_string(r.samples[1].length) + ", " +
             std::to_string(r.samples[1].new_length_ms) + " ms" +
             (r.mode == zenith::DynamicShapes::Auto ? " (with the probes)" : "") + "\n";
    // A sweep that never reached the JIT backend, or whose compiles left no files, proves nothing.
    if (first.jit_nodes == 0) {
      std::fprintf(stderr, "bench_shape_sweep: %s: no node ran on jit_cuda\n", r.model.c_str());
      status = 1;
    }
    if (r.mode == zenith::DynamicShapes::Auto && late_captures > 0) {
      std::fprintf(stderr, "bench_shape_sweep: %s: automatic mode captured %lld lengths after the second\n",
                   r.model.c_str(), static_cast<long long>(late_captures));
      status = 1;
    }
    for (const auto& s : r.samples) {
      if (s.fallback) {
        std::fprintf(stderr, "bench_shape_sweep: %s: length %lld ran eagerly\n", r.model.c_str(), static_cast<long long>(s.length));
        status = 1;
      }
      // Automatic mode's second length fits the symbolic plan, whose kernels may differ (nodes
      // that depend on the sizes are no longer folded): compiles are allowed up to it.
      const std::size_t allowed = r.mode == zenith::DynamicShapes::Auto ? 2 : 1;
      if (static_cast<std::size_t>(&s - r.samples.data()) >= allowed && s.nvrtc > 0) {
        notes += r.model + ": length " + std::to_string(s.length) + " compiled " + std::to_string(s.nvrtc) +
                 " new kernels\n";
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
