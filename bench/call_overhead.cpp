// What Zenith adds to a call on the host: a TorchScript model called directly, through a plan hit,
// and through a signature that runs eagerly, at a size where the host's work is visible.
//
//   bench_call_overhead (MODEL.pt (--tokens B,L,VOCAB | --image B,C,H,W) | --synthetic N [--chain K])
//                       [--device cpu|cuda] [--dtype float32|float16] [--calls N] [--reps R] [--label TEXT]
//                       [--torchscript-fuser on|off] [--host-only] [--backends NAME,...]
//
// --tokens feeds token ids below VOCAB and an all-ones attention mask (a Hugging Face text model,
// traced with those two inputs); --image one standard-normal image batch. --synthetic N builds a
// scripted module instead, with N parameters of 64 elements and a forward of one addition: the
// module's own work is about one launch, so what a mode adds over the direct call is Zenith's host
// work alone (signature, state checks, plan or graph bookkeeping), free of the model's noise.
// --chain K (K at most N) makes its forward K links of a product and a softmax over 8 x 8 values
// instead (the parameters 8 x 8): a plan of about 2K launches that a CUDA graph replays, whose
// host time against K, with ZENITH_PROGRAMMATIC_LAUNCH on and off, tells a graph's launch cost per
// node and per programmatic edge from the call's fixed costs (copies in and out, bookkeeping).
//
// Each mode runs R repetitions of N calls after a warm-up, each repetition ended by a device
// synchronization. The modes' repetitions are interleaved, and each mode's excess over the direct
// call is the median of its per-repetition differences from the direct call's repetition beside
// it (paired, so that a drift of clocks or load between repetitions cancels); the table gives the
// median microseconds per call of each mode and those excesses. Its last column is the host's
// share alone: the median time until a call returns, the device synchronized between calls
// (host_us).
//
// The eager signature is a real fallback: the compiled module is allowed only a backend that
// cannot run the model's device (cpu for a CUDA model, jit_cuda for a CPU one), so the capture's
// lowering fails and the signature runs eagerly, through the path any signature that falls back
// takes (parameters, signature, plan cache, then the module's own forward).
//
// --host-only measures the last column alone (the other columns print "-"): a profiler attached
// to the run then sees no call waiting on a launch queue that the calls before it filled. Both
// ways, every mode is called ten times before the first timed call.
//
// --backends gives the planned module CompileOptions::backends (default: every backend found, in
// priority order; ZENITH_BACKENDS would set the eager-signature module's too): with one backend
// left out, its kernels' part of a graphed call's launch shows.
//
// --label names the model in the printed row (default: the file's path, or "synthetic N").
// --torchscript-fuser off turns TorchScript's tensor-expression fuser off for the module's own
// forward (the real-model exporter marks the models whose warm-up it stalls on CUDA).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <torch/csrc/jit/passes/tensorexpr_fuser.h>
#include <torch/cuda.h>
#include <torch/script.h>
#include <torch/torch.h>

#include "core/name_list.h"
#include "report_errors.h"
#include "zenith/compile.h"

namespace {

struct Args {
  std::string model;
  std::vector<std::int64_t> tokens, image;
  std::string device = "cpu", dtype = "float32";
  std::string label;
  int synthetic = 0;  // parameters of the synthetic module; 0: a model file
  int chain = 0;      // links of the synthetic module's forward; 0: one addition
  bool torchscript_fuser = true;
  bool host_only = false;  // only host_us
  std::vector<std::string> backends;  // the planned module's; empty: every backend found
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
    else if (flag == "--synthetic") args.synthetic = std::stoi(value());
    else if (flag == "--chain") args.chain = std::stoi(value());
    else if (flag == "--device") args.device = value();
    else if (flag == "--dtype") args.dtype = value();
    else if (flag == "--calls") args.calls = std::stoi(value());
    else if (flag == "--reps") args.reps = std::stoi(value());
    else if (flag == "--label") args.label = value();
    else if (flag == "--host-only") args.host_only = true;
    else if (flag == "--backends") {
      args.backends = zenith::split_names(value());
      if (args.backends.empty()) throw std::invalid_argument("--backends takes backend names (like torch_gpu,cpu)");
    }
    else if (flag == "--torchscript-fuser") {
      const std::string on = value();
      if (on != "on" && on != "off") throw std::invalid_argument("--torchscript-fuser takes on or off, not " + on);
      args.torchscript_fuser = on == "on";
    }
    else if (args.model.empty() && flag.rfind("--", 0) != 0) args.model = flag;
    else throw std::invalid_argument("unknown argument " + flag + " (see the comment at the top of call_overhead.cpp)");
  }
  const bool model_ok = !args.model.empty() && (args.tokens.size() == 3) != (args.image.size() == 4);
  const bool synthetic_ok = args.model.empty() && args.tokens.empty() && args.image.empty() && args.synthetic > 0;
  if (model_ok == synthetic_ok) {
    throw std::invalid_argument("usage: bench_call_overhead (MODEL.pt (--tokens B,L,VOCAB | --image B,C,H,W) | "
                                "--synthetic N [--chain K]) [--device cpu|cuda] [--dtype float32|float16] [--calls N] "
                                "[--reps R] [--label TEXT] [--torchscript-fuser on|off] [--host-only] "
                                "[--backends NAME,...]");
  }
  if (args.chain < 0 || args.chain > args.synthetic || (args.chain > 0 && !args.model.empty())) {
    throw std::invalid_argument(fmt::format(
        "--chain takes 1 to the --synthetic count ({}) links, and only with --synthetic; got {}", args.synthetic, args.chain));
  }
  if (args.label.empty()) {
    args.label = !synthetic_ok ? args.model
                 : args.chain > 0 ? fmt::format("synthetic {}, chain {}", args.synthetic, args.chain)
                                  : fmt::format("synthetic {}", args.synthetic);
  }
  return args;
}

// The synthetic module's tensors: 64 elements, as 8 x 8 matrices where they take part in a chain.
std::vector<std::int64_t> synthetic_shape(bool chained) {
  return chained ? std::vector<std::int64_t>{8, 8} : std::vector<std::int64_t>{64};
}

// N parameters of 64 elements, of which the forward reads one (or, with `chain` links, the first
// `chain` as 8 x 8 matrices): the rest are state Zenith checks and passes at every call, as it
// would a model's.
torch::jit::Module synthetic_module(int parameters, int chain, const at::Device& device, at::ScalarType dtype) {
  torch::jit::Module module("Synthetic");
  for (int i = 0; i < parameters; ++i) {
    const auto shape = synthetic_shape(i < chain);
    // Scaled so that the products stay near 1 and the softmaxes far from saturating.
    module.register_parameter(fmt::format("p{}", i), (torch::randn(shape) / 8).to(device, dtype), false);
  }
  std::string forward = "def forward(self, x):\n";
  if (chain == 0) forward += "    return x + self.p0\n";
  for (int i = 0; i < chain; ++i) forward += fmt::format("    x = torch.softmax(torch.mm(x, self.p{}), -1)\n", i);
  if (chain > 0) forward += "    return x\n";
  module.define(forward);
  return module;
}

std::vector<c10::IValue> inputs_of(const Args& args, const at::Device& device) {
  auto dtype = args.dtype == "float16" ? at::kHalf : at::kFloat;
  if (args.synthetic > 0) return {torch::randn(synthetic_shape(args.chain > 0)).to(device, dtype)};
  if (!args.tokens.empty()) {
    const auto batch = args.tokens[0], length = args.tokens[1], vocab = args.tokens[2];
    return {torch::randint(vocab, {batch, length}, at::TensorOptions().dtype(at::kLong)).to(device),
            torch::ones({batch, length}, at::TensorOptions().dtype(at::kLong)).to(device)};
  }
  return {torch::randn(args.image).to(device, dtype)};
}

struct Timing {
  std::vector<double> median_us;  // per mode: median microseconds per call
  std::vector<double> excess_us;  // per mode: median of its repetitions' differences from the first mode's
};

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

void synchronize(const at::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize();
}

// Per mode, the samples of its `reps` repetitions: the modes' repetitions interleaved so that a
// drift of clocks or of the machine's load reaches all alike, each round in the next permutation
// of the modes (direct, hit, eager; direct, eager, hit; hit, direct, eager; ...) so that no mode
// always follows the same other one (a plan's graph replays leave the GPU and its allocator
// otherwise than eager does). `repetition(k)` runs one repetition of mode k and returns its samples.
std::vector<std::vector<double>> interleaved(int reps, std::size_t modes,
                                             const std::function<std::vector<double>(std::size_t)>& repetition) {
  std::vector<std::vector<double>> samples(modes);
  std::vector<std::size_t> order(modes);
  std::iota(order.begin(), order.end(), 0);
  for (int rep = 0; rep < reps; ++rep, std::next_permutation(order.begin(), order.end())) {
    for (std::size_t k : order) {
      const auto taken = repetition(k);
      samples[k].insert(samples[k].end(), taken.begin(), taken.end());
    }
  }
  return samples;
}

double microseconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
}

// Ten calls of each of `calls`: the planned module's capture, compiles and graph capture come
// before any timed call, --host-only's included.
void warm_up(const at::Device& device, const std::vector<std::function<void()>>& calls) {
  for (const auto& call : calls) {
    for (int i = 0; i < 10; ++i) call();
  }
  synchronize(device);
}

// Microseconds per call of each of `calls`: each repetition's N calls timed together up to a
// device synchronization, one sample a repetition.
Timing time_modes(const Args& args, const at::Device& device, const std::vector<std::function<void()>>& calls) {
  const auto per_call = interleaved(args.reps, calls.size(), [&](std::size_t k) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < args.calls; ++i) calls[k]();
    synchronize(device);
    return std::vector<double>{microseconds_since(start) / args.calls};
  });
  Timing timing;
  for (const auto& times : per_call) {
    timing.median_us.push_back(median(times));
    std::vector<double> differences;
    for (std::size_t rep = 0; rep < times.size(); ++rep) differences.push_back(times[rep] - per_call[0][rep]);
    timing.excess_us.push_back(median(differences));
  }
  return timing;
}

// Microseconds until each call returns to its caller, the device synchronized after every call so
// that none waits on a queue the one before it filled: the host's share of a call (for a plan
// replayed as a CUDA graph: the signature, the state check, the input copies enqueued, the replay
// launched and the outputs handed back). Per mode, the median of every call of every repetition.
std::vector<double> host_us(const Args& args, const at::Device& device, const std::vector<std::function<void()>>& calls) {
  const auto per_call = interleaved(args.reps, calls.size(), [&](std::size_t k) {
    std::vector<double> taken;
    for (int i = 0; i < args.calls; ++i) {
      const auto start = std::chrono::steady_clock::now();
      calls[k]();
      taken.push_back(microseconds_since(start));
      synchronize(device);
    }
    return taken;
  });
  std::vector<double> medians;
  for (const auto& times : per_call) medians.push_back(median(times));
  return medians;
}

int run(int argc, char** argv) {
  auto args = parse(argc, argv);
  const at::Device device(args.device);
  torch::manual_seed(0);
  torch::NoGradGuard no_grad;
  torch::jit::setTensorExprFuserEnabled(args.torchscript_fuser);
  const auto dtype = args.dtype == "float16" ? at::kHalf : at::kFloat;
  auto module = args.synthetic > 0 ? synthetic_module(args.synthetic, args.chain, device, dtype)
                                   : torch::jit::load(args.model, device);
  module.eval();
  auto inputs = inputs_of(args, device);
  for (int i = 0; i < 3; ++i) module.forward(inputs);  // the application's own calls come first

  zenith::CompileOptions planned;
  planned.name = "planned";
  planned.backends = args.backends;
  auto fast = zenith::compile(module, planned);
  zenith::CompileOptions unplannable;
  unplannable.name = "eager";
  unplannable.backends = {device.is_cuda() ? "cpu" : "jit_cuda"};
  unplannable.log_level = zenith::LogLevel::Error;  // its fallback warning is expected
  auto eager = zenith::compile(module, unplannable);

  const std::vector<std::function<void()>> calls = {[&] { module.forward(inputs); }, [&] { fast(inputs); },
                                                    [&] { eager(inputs); }};
  warm_up(device, calls);
  const auto timing = args.host_only ? Timing{} : time_modes(args, device, calls);
  const auto host = host_us(args, device, calls);
  const auto stats = fast.stats();
  const auto report = fast.report();
  if (stats.eager_calls > 0) throw std::runtime_error("the planned module ran eagerly: " + report.fallback_reason);
  if (eager.stats().eager_calls == 0) throw std::runtime_error("the unplannable module did not run eagerly");
  std::fprintf(stderr,
               "plan: %lld kernels (%lld without a compile), %lld runs, %lld replayed a CUDA graph, "
               "%lld graphs captured, %lld captures failed\n",
               static_cast<long long>(report.groups), static_cast<long long>(report.groups_without_compile),
               static_cast<long long>(stats.hits + stats.misses), static_cast<long long>(stats.graph_replays),
               static_cast<long long>(stats.graph_captures), static_cast<long long>(stats.graph_failures));

  std::printf("| model | device | dtype | direct us/call | plan hit us/call | eager signature us/call | "
              "host us until a call returns: direct / plan hit / eager signature |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- |\n");
  auto column = [&](std::size_t mode) -> std::string {
    if (args.host_only) return "-";
    if (mode == 0) return fmt::format("{:.1f}", timing.median_us[0]);
    return fmt::format("{:.1f} ({:+.1f}, {:+.1f}%)", timing.median_us[mode], timing.excess_us[mode],
                       100 * timing.excess_us[mode] / timing.median_us[0]);
  };
  std::printf("| %s | %s | %s | %s | %s | %s | %.1f / %.1f / %.1f |\n", args.label.c_str(), args.device.c_str(),
              args.dtype.c_str(), column(0).c_str(), column(1).c_str(), column(2).c_str(), host[0], host[1], host[2]);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return zenith::bench::run_reporting_errors(argc, argv, run); }
