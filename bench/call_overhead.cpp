// What Zenith adds to a call on the host: a TorchScript model called directly, through a plan hit,
// and through a signature that runs eagerly, at a size where the host's work is visible.
//
//   bench_call_overhead MODEL.pt (--tokens B,L,VOCAB | --image B,C,H,W) [--device cpu|cuda]
//                       [--dtype float32|float16] [--calls N] [--reps R] [--label TEXT]
//
// --tokens feeds token ids below VOCAB and an all-ones attention mask (a Hugging Face text model,
// traced with those two inputs); --image one standard-normal image batch. Each mode runs R
// repetitions of N calls after a warm-up, each repetition ended by a device synchronization, and
// prints the median microseconds per call and its excess over the direct call. The modes' repetitions
// are interleaved.
//
// The eager signature is a real fallback: the compiled module is allowed only a backend that
// cannot run the model's device (cpu for a CUDA model, jit_cuda for a CPU one), so the capture's
// lowering fails and the signature runs eagerly, through the path any signature that falls back
// takes (parameters, signature, plan cache, then the module's own forward).
//
// --label names the model in the printed row (default: the file's path).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <torch/cuda.h>
#include <torch/script.h>
#include <torch/torch.h>

#include "report_errors.h"
#include "zenith/compile.h"

namespace {

struct Args {
  std::string model;
  std::vector<std::int64_t> tokens, image;
  std::string device = "cpu", dtype = "float32";
  std::string label;
  int calls = 50, reps = 7;
};

std::vector<std::int64_t> numbers(const char* text) {
  std::vector<std::int64_t> values;
  for (const char* at = text; *at;) {
    char* end = nullptr;
    values.push_back(std::strtoll(at, &end, 10));
    if (end == at) throw std::invalid_argument(fmt::format("'{}' is not a list of integers (like 2,128)", text));
    at = *end == ',' ? end + 1 : end;
  }
  return values;
}

Args parse(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) throw std::invalid_argument(flag + " needs a value");
      return argv[++i];
    };
    if (flag == "--tokens") args.tokens = numbers(value());
    else if (flag == "--image") args.image = numbers(value());
    else if (flag == "--device") args.device = value();
    else if (flag == "--dtype") args.dtype = value();
    else if (flag == "--calls") args.calls = std::stoi(value());
    else if (flag == "--reps") args.reps = std::stoi(value());
    else if (flag == "--label") args.label = value();
    else if (args.model.empty() && flag.rfind("--", 0) != 0) args.model = flag;
    else throw std::invalid_argument("unknown argument " + flag + " (see the comment at the top of call_overhead.cpp)");
  }
  if (args.model.empty() || (args.tokens.size() != 3) == (args.image.size() != 4)) {
    throw std::invalid_argument("usage: bench_call_overhead MODEL.pt (--tokens B,L,VOCAB | --image B,C,H,W) "
                                "[--device cpu|cuda] [--dtype float32|float16] [--calls N] [--reps R] [--label TEXT]");
  }
  if (args.label.empty()) args.label = args.model;
  return args;
}

std::vector<c10::IValue> inputs_of(const Args& args, const at::Device& device) {
  if (!args.tokens.empty()) {
    const auto batch = args.tokens[0], length = args.tokens[1], vocab = args.tokens[2];
    return {torch::randint(vocab, {batch, length}, at::TensorOptions().dtype(at::kLong)).to(device),
            torch::ones({batch, length}, at::TensorOptions().dtype(at::kLong)).to(device)};
  }
  auto dtype = args.dtype == "float16" ? at::kHalf : at::kFloat;
  return {torch::randn(args.image).to(device, dtype)};
}

// Median microseconds per call of each of `calls`, their repetitions interleaved so that a drift of
// clocks or of the machine's load reaches all alike, each repetition in the next permutation of the
// modes (direct, hit, eager; direct, eager, hit; hit, direct, eager; ...) so that no mode always
// follows the same other one (a plan's graph replays leave the GPU and its allocator otherwise than
// eager does).
std::vector<double> median_us_per_call(const Args& args, const at::Device& device,
                                       const std::vector<std::function<void()>>& calls) {
  auto sync = [&] {
    if (device.is_cuda()) torch::cuda::synchronize();
  };
  for (const auto& call : calls) {
    for (int i = 0; i < 10; ++i) call();
  }
  sync();
  std::vector<std::vector<double>> per_call(calls.size());
  std::vector<std::size_t> order(calls.size());
  std::iota(order.begin(), order.end(), 0);
  for (int rep = 0; rep < args.reps; ++rep, std::next_permutation(order.begin(), order.end())) {
    for (std::size_t k : order) {
      auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < args.calls; ++i) calls[k]();
      sync();
      per_call[k].push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() /
                            args.calls);
    }
  }
  std::vector<double> medians;
  for (auto& times : per_call) {
    std::sort(times.begin(), times.end());
    medians.push_back(times[times.size() / 2]);
  }
  return medians;
}

int run(int argc, char** argv) {
  auto args = parse(argc, argv);
  const at::Device device(args.device);
  torch::manual_seed(0);
  torch::NoGradGuard no_grad;
  auto module = torch::jit::load(args.model, device);
  module.eval();
  auto inputs = inputs_of(args, device);
  for (int i = 0; i < 3; ++i) module.forward(inputs);  // the application's own calls come first

  zenith::CompileOptions planned;
  planned.name = "planned";
  auto fast = zenith::compile(module, planned);
  zenith::CompileOptions unplannable;
  unplannable.name = "eager";
  unplannable.backends = {device.is_cuda() ? "cpu" : "jit_cuda"};
  unplannable.log_level = zenith::LogLevel::Error;  // its fallback warning is expected
  auto eager = zenith::compile(module, unplannable);

  auto medians = median_us_per_call(args, device, {[&] { module.forward(inputs); }, [&] { fast(inputs); },
                                                    [&] { eager(inputs); }});
  const double direct = medians[0], hit = medians[1], fallback = medians[2];
  if (fast.stats().eager_calls > 0) throw std::runtime_error("the planned module ran eagerly: " + fast.report().fallback_reason);
  if (eager.stats().eager_calls == 0) throw std::runtime_error("the unplannable module did not run eagerly");

  std::printf("| model | device | dtype | direct us/call | plan hit us/call | eager signature us/call |\n");
  std::printf("| --- | --- | --- | --- | --- | --- |\n");
  auto excess = [&](double us) { return fmt::format("{:.1f} ({:+.1f}, {:+.1f}%)", us, us - direct, 100 * (us - direct) / direct); };
  std::printf("| %s | %s | %s | %.1f | %s | %s |\n", args.label.c_str(), args.device.c_str(), args.dtype.c_str(), direct,
              excess(hit).c_str(), excess(fallback).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return zenith::bench::run_reporting_errors(argc, argv, run); }
