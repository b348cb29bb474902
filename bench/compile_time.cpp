// Benchmark: what the JIT CUDA backend's kernels cost to get, at each level of its kernel cache.
//   cold    NVRTC compiles into an empty cache folder
//   warm    the same kernels read from that folder by a second process; the memory level is per
//           process, so only a new process measures the disk level honestly
//   memory  the same workloads compiled again in the process that compiled them: every kernel
//           from the memory level
// Workloads: single fused groups, elementwise and row reductions (each one kernel, so backend_ms
// per kernel is a per-kernel time), and a whole BERT-base encoder plan (float16, batch 1,
// sequence 128).
//   bench_compile_time                     runs everything, re-executing itself for the warm level
//   bench_compile_time --phase warm FOLDER (internal) the warm level over the cache folder FOLDER
// Prints a markdown table, then plain lines. Exits 1 when the warm or memory level compiled
// anything, a single group did not compile to exactly one kernel, or a workload never reached the
// JIT backend; 2 without a CUDA device.
//
// NVRTC compiles are counted as new files in the cache folder (one per compiled key), not from the
// report's kernels_compiled: the report counts every backend's groups there, and the PyTorch GPU
// plugin's groups compile nothing. kernel_cache_hits comes from the JIT backend alone.
#include <dirent.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <ATen/cuda/CUDAContext.h>
#include <torch/torch.h>

#include "backends/cuda/cuda_architecture.h"
#include "backends/cuda/nvrtc_compiler.h"
#include "models/bert.h"
#include "fresh_cache_folder.h"
#include "report_errors.h"
#include "zenith/compile.h"

extern char** environ;

namespace {

using zenith::bench::FreshFolder;
using zenith::bench::kernel_files;

// --- Workloads ----------------------------------------------------------------------------------

// What one compile of a workload reported; `nvrtc` is the number of new kernel files.
struct Outcome {
  double backend_ms = 0;
  double total_ms = 0;
  std::int64_t compiled = 0;
  std::int64_t hits = 0;
  std::int64_t nvrtc = 0;
  std::int64_t groups = 0;
  std::int64_t jit_nodes = 0;
};

Outcome outcome_of(const zenith::CompileReport& report, std::int64_t nvrtc) {
  Outcome o;
  o.backend_ms = report.backend_ms;
  o.total_ms = report.total_ms;
  o.compiled = report.kernels_compiled;
  o.hits = report.kernel_cache_hits;
  o.nvrtc = nvrtc;
  o.groups = report.groups;
  o.jit_nodes = report.nodes_per_backend.count("jit_cuda") ? report.nodes_per_backend.at("jit_cuda") : 0;
  return o;
}

at::Tensor startup_chain(at::Tensor x) { return x * 3 - 1; }
at::Tensor gelu_chain(at::Tensor x, at::Tensor a, at::Tensor b, at::Tensor c) { return torch::gelu(x * a + b) * c; }
// The zoo's fused groups: a residual add into a layer norm, an attention softmax with its scale and
// additive mask, the RMSNorm pattern, and a gated SiLU. Each is one group, so one kernel.
at::Tensor add_layer_norm(at::Tensor x, at::Tensor residual, at::Tensor w, at::Tensor b) {
  return torch::layer_norm(x + residual, {x.size(-1)}, w, b, 1e-12);
}
at::Tensor attention_softmax(at::Tensor scores, at::Tensor mask) { return torch::softmax(scores * 0.125 + mask, -1); }
at::Tensor rms_norm(at::Tensor x, at::Tensor w) { return x * torch::rsqrt(x.pow(2).mean(-1, true) + 1e-5) * w; }
at::Tensor gated_silu(at::Tensor gate, at::Tensor up) { return torch::silu(gate) * up; }

// Compiles `fn` for these inputs and returns the first call's report; the second call runs the
// plan, so a kernel that compiled but cannot load or launch fails here rather than unnoticed.
template <typename F, typename... T>
zenith::CompileReport compile_and_run(F* fn, const T&... inputs) {
  zenith::CompileOptions options;
  options.fallback_to_eager = false;
  auto fast = zenith::compile(fn, options);
  fast(inputs...);
  auto report = fast.report();
  fast(inputs...);
  torch::cuda::synchronize();
  return report;
}

at::Tensor randn(std::vector<std::int64_t> sizes, c10::ScalarType dtype) {
  return torch::randn(sizes, torch::TensorOptions().dtype(dtype).device(torch::kCUDA));
}

struct Workload {
  enum class Kind {
    Startup,  // the process's first compile, which also pays NVRTC's own start-up
    Single,   // one fused group: per-kernel figures apply
    Plan,     // a whole model
  };
  std::string name;
  Kind kind;
  std::function<zenith::CompileReport()> run;
};

// BERT-base is built once per process: its weights do not change what compiles, and building it
// takes longer than a warm compile.
struct BertBase {
  zenith::models::Bert model{nullptr};
  at::Tensor ids, mask;
  double last_error = -1;

  BertBase() {
    torch::manual_seed(0);
    auto config = zenith::models::BertConfig::base();
    model = zenith::models::Bert(config);
    model->eval();
    model->to(torch::kCUDA, torch::kHalf);
    auto options = torch::TensorOptions().dtype(torch::kLong).device(torch::kCUDA);
    ids = torch::randint(config.vocab_size, {1, 128}, options);
    mask = torch::ones({1, 128}, options);
  }

  zenith::CompileReport run() {
    zenith::CompileOptions options;
    options.name = "bert-base";
    options.fallback_to_eager = false;
    auto fast = zenith::compile(model, options);
    fast(ids, mask);
    auto report = fast.report();
    auto got = fast(ids, mask).to(at::kFloat);
    auto want = model->forward(ids, mask).to(at::kFloat);
    last_error = (got - want).abs().max().item<double>() / std::max(want.abs().max().item<double>(), 1e-12);
    return report;
  }
};

std::vector<Workload> workloads(BertBase& bert) {
  auto f32 = at::kFloat;
  return {
      {"first compile of the process (NVRTC start-up): x*3-1 f32 [2^16]", Workload::Kind::Startup,
       [=] { return compile_and_run(&startup_chain, randn({1 << 16}, f32)); }},
      {"gelu(x*a+b)*c f32 [2^20]", Workload::Kind::Single,
       [=] {
         auto x = randn({1 << 20}, f32);
         return compile_and_run(&gelu_chain, x, randn({1 << 20}, f32), randn({1 << 20}, f32), randn({1 << 20}, f32));
       }},
      {"layer_norm(x+residual) f32 [4096,768]", Workload::Kind::Single,
       [=] {
         return compile_and_run(&add_layer_norm, randn({4096, 768}, f32), randn({4096, 768}, f32), randn({768}, f32),
                                randn({768}, f32));
       }},
      {"softmax(scores*0.125+mask) f16 [8,12,128,128], mask [8,1,1,128]", Workload::Kind::Single,
       [=] {
         return compile_and_run(&attention_softmax, randn({8, 12, 128, 128}, at::kHalf), randn({8, 1, 1, 128}, at::kHalf));
       }},
      {"RMSNorm x*rsqrt(mean(x^2)+eps)*w bf16 [4096,2048]", Workload::Kind::Single,
       [=] { return compile_and_run(&rms_norm, randn({4096, 2048}, at::kBFloat16), randn({2048}, at::kBFloat16)); }},
      {"silu(gate)*up bf16 [4096,5632]", Workload::Kind::Single,
       [=] { return compile_and_run(&gated_silu, randn({4096, 5632}, at::kBFloat16), randn({4096, 5632}, at::kBFloat16)); }},
      {"BERT-base encoder plan f16 [1,128]", Workload::Kind::Plan, [&bert] { return bert.run(); }},
  };
}

std::vector<Outcome> measure_all(const std::vector<Workload>& list, const std::string& folder) {
  std::vector<Outcome> outcomes;
  for (const auto& workload : list) {
    const auto before = kernel_files(folder);
    auto report = workload.run();
    outcomes.push_back(outcome_of(report, kernel_files(folder) - before));
  }
  return outcomes;
}

// --- The warm level, in a second process --------------------------------------------------------

// One line per workload, in order: "OUTCOME backend total compiled hits nvrtc groups jit_nodes".
int warm_phase(const std::string& folder) {
  setenv("ZENITH_CACHE_DIR", folder.c_str(), 1);
  BertBase bert;
  for (const auto& o : measure_all(workloads(bert), folder)) {
    std::printf("OUTCOME %.6f %.6f %lld %lld %lld %lld %lld\n", o.backend_ms, o.total_ms, static_cast<long long>(o.compiled),
                static_cast<long long>(o.hits), static_cast<long long>(o.nvrtc), static_cast<long long>(o.groups),
                static_cast<long long>(o.jit_nodes));
  }
  return 0;
}

// Runs this executable's warm phase over `folder` and parses its outcomes; empty on failure.
std::vector<Outcome> run_warm_process(const std::string& folder) {
  std::vector<char> self(4096);
  const ssize_t length = readlink("/proc/self/exe", self.data(), self.size() - 1);
  if (length <= 0) {
    std::fprintf(stderr, "bench_compile_time: cannot find its own executable: %s\n", std::strerror(errno));
    return {};
  }
  self[static_cast<std::size_t>(length)] = '\0';
  int pipe_ends[2];
  if (pipe(pipe_ends) != 0) return {};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addclose(&actions, pipe_ends[0]);
  posix_spawn_file_actions_adddup2(&actions, pipe_ends[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, pipe_ends[1]);
  std::string phase_flag = "--phase", phase = "warm", folder_arg = folder;
  char* argv[] = {self.data(), phase_flag.data(), phase.data(), folder_arg.data(), nullptr};
  pid_t child = 0;
  const int spawned = posix_spawn(&child, self.data(), &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  close(pipe_ends[1]);
  if (spawned != 0) {
    close(pipe_ends[0]);
    std::fprintf(stderr, "bench_compile_time: cannot start the warm process: %s\n", std::strerror(spawned));
    return {};
  }
  std::string text;
  char buffer[4096];
  for (ssize_t n; (n = read(pipe_ends[0], buffer, sizeof buffer)) != 0;) {
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    text.append(buffer, static_cast<std::size_t>(n));
  }
  close(pipe_ends[0]);
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "bench_compile_time: the warm process failed (status %d); its output:\n%s\n", status, text.c_str());
    return {};
  }
  std::vector<Outcome> outcomes;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line);
    std::string tag;
    Outcome o;
    long long compiled = 0, hits = 0, nvrtc = 0, groups = 0, jit_nodes = 0;
    if (fields >> tag >> o.backend_ms >> o.total_ms >> compiled >> hits >> nvrtc >> groups >> jit_nodes && tag == "OUTCOME") {
      o.compiled = compiled, o.hits = hits, o.nvrtc = nvrtc, o.groups = groups, o.jit_nodes = jit_nodes;
      outcomes.push_back(o);
    }
  }
  return outcomes;
}

// --- Output -------------------------------------------------------------------------------------

double per(double ms, std::int64_t kernels) { return kernels > 0 ? ms / static_cast<double>(kernels) : 0.0; }

std::string device_line() {
  const auto* properties = at::cuda::getCurrentDeviceProperties();
  int driver = 0;
  cudaDriverGetVersion(&driver);
  const int nvrtc = zenith::cuda::nvrtc_version();
  std::string target = "unknown";
  try {
    target = zenith::cuda::choose_target({properties->major, properties->minor},
                                         zenith::cuda::nvrtc_supported_architectures())
                 .to_string();
  } catch (const std::exception& error) {
    target = error.what();
  }
  std::ostringstream line;
  line << properties->name << " (compute " << properties->major << "." << properties->minor << "), NVRTC "
       << nvrtc / 1000 << "." << (nvrtc % 1000) / 10 << " targeting " << target << ", driver API " << driver / 1000
       << "." << (driver % 1000) / 10 << ", " << std::max(1u, std::thread::hardware_concurrency())
       << " host threads compile a plan's kernels";
  return line.str();
}

int run(int argc, char** argv) {
  if (!torch::cuda::is_available()) {
    std::fprintf(stderr, "bench_compile_time needs a CUDA device\n");
    return 2;
  }
  torch::NoGradGuard no_grad;
  if (argc == 4 && std::string(argv[1]) == "--phase" && std::string(argv[2]) == "warm") return warm_phase(argv[3]);
  if (argc != 1) {
    std::fprintf(stderr, "usage: bench_compile_time\n");
    return 2;
  }

  // The plugin reads ZENITH_CACHE_DIR once, when the first compile loads it; a folder of this run's
  // own (never the runner's, which earlier tests have filled) makes the first level truly cold.
  const FreshFolder fresh("zenith-bench-compile");
  const std::string& folder = fresh.path;
  setenv("ZENITH_CACHE_DIR", folder.c_str(), 1);
  BertBase bert;
  const auto list = workloads(bert);
  const auto cold = measure_all(list, folder);
  const auto memory = measure_all(list, folder);
  const double bert_error = bert.last_error;
  const auto warm = run_warm_process(folder);
  const auto files = kernel_files(folder);
  if (warm.size() != list.size()) {
    std::fprintf(stderr, "bench_compile_time: the warm process reported %zu workloads, expected %zu\n", warm.size(),
                 list.size());
    return 1;
  }

  int status = 0;
  auto problem = [&](const std::string& what) {
    std::fprintf(stderr, "bench_compile_time: %s\n", what.c_str());
    status = 1;
  };
  std::printf("Device: %s\n\n", device_line().c_str());
  std::printf("| what | kernels | cold ms (NVRTC) | warm ms (disk, new process) | memory ms (same process) |\n");
  std::printf("| --- | --- | --- | --- | --- |\n");
  std::vector<double> cold_per_kernel;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const auto& c = cold[i];
    const auto& w = warm[i];
    const auto& m = memory[i];
    const auto& name = list[i].name;
    if (c.jit_nodes == 0) problem(name + ": no node ran on jit_cuda");
    if (w.nvrtc != 0) problem(name + ": the warm process compiled " + std::to_string(w.nvrtc) + " kernels");
    if (m.nvrtc != 0) problem(name + ": the memory level compiled " + std::to_string(m.nvrtc) + " kernels");
    if (list[i].kind != Workload::Kind::Plan) {
      if (c.nvrtc != 1 || c.compiled != 1) {
        problem(name + ": expected one kernel compiled cold, found " + std::to_string(c.nvrtc) + " new files and " +
                std::to_string(c.compiled) + " in the report");
      }
      if (w.compiled != 0 || w.hits != 1) problem(name + ": warm, expected 0 compiled and 1 cache hit");
      if (list[i].kind == Workload::Kind::Single) cold_per_kernel.push_back(per(c.backend_ms, c.nvrtc));
      std::printf("| %s, backend_ms per kernel | %lld | %.1f | %.2f | %.2f |\n", name.c_str(), static_cast<long long>(c.nvrtc),
                  per(c.backend_ms, c.nvrtc), per(w.backend_ms, w.hits), per(m.backend_ms, m.hits));
    } else {
      // Identical groups of different layers share a key, so there are fewer kernels than groups.
      std::string kernels = std::to_string(c.nvrtc) + " NVRTC kernels for " + std::to_string(w.hits) + " jit_cuda groups of " +
                            std::to_string(w.groups);
      std::printf("| %s, backend_ms | %s | %.1f | %.1f | %.1f |\n", name.c_str(), kernels.c_str(), c.backend_ms, w.backend_ms,
                  m.backend_ms);
      std::printf("| %s, total_ms | %s | %.1f | %.1f | %.1f |\n", name.c_str(), kernels.c_str(), c.total_ms, w.total_ms,
                  m.total_ms);
    }
  }
  std::sort(cold_per_kernel.begin(), cold_per_kernel.end());
  std::printf("\n");
  if (!cold_per_kernel.empty()) {
    std::printf("cold NVRTC ms per kernel, median of the %zu single groups: %.1f\n", cold_per_kernel.size(),
                cold_per_kernel[cold_per_kernel.size() / 2]);
  }
  auto line = [](const std::string& name, const char* level, const Outcome& o) {
    std::printf("%s | %s: backend_ms %.3f, total_ms %.3f, NVRTC compiles %lld, report kernels_compiled %lld, "
                "kernel_cache_hits %lld, groups %lld, jit_cuda nodes %lld\n",
                name.c_str(), level, o.backend_ms, o.total_ms, static_cast<long long>(o.nvrtc),
                static_cast<long long>(o.compiled), static_cast<long long>(o.hits), static_cast<long long>(o.groups),
                static_cast<long long>(o.jit_nodes));
  };
  for (std::size_t i = 0; i < list.size(); ++i) {
    line(list[i].name, "cold", cold[i]);
    line(list[i].name, "warm", warm[i]);
    line(list[i].name, "memory", memory[i]);
  }
  std::printf("kernel files in the cache folder at the end: %lld\n", static_cast<long long>(files));
  std::printf("BERT-base f16 compiled vs eager, max rel. error: %.2e\n", bert_error);
  return status;
}

}  // namespace

int main(int argc, char** argv) { return zenith::bench::run_reporting_errors(argc, argv, run); }
