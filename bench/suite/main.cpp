// The C++ half of the benchmark suite (scripts/bench runs it after bench/suite/prepare.py): every
// case of cases.json in eager LibTorch, TorchScript, Zenith and AOTInductor, results as JSON.
//   zenith_bench_suite --dir FOLDER --out results.json [--cases cases.json] [--only a,b]
//                      [--modes torchscript,zenith,aoti] [--seconds S] [--budget-s S]
//                      [--tiny]   the cases' smoke sizes (to try the whole pipeline on a CPU)
//                      [--memory-trace N]  memory after each of a mode's first N calls that
//                                 raised a peak, on standard error (memory_trace.h); N below the
//                                 warm-up's calls leaves the timed ones alone (5 for a fixed-shape
//                                 case, 387 for a decoder: its first three generations; the
//                                 sweep's steps are all timed, one call each)
//                      [--profile N]  after a fixed-shape case's timed calls, N more of each
//                                 mode under Kineto: wall and device busy time, kernel launches
//                                 and the longest kernels, as Markdown on standard output (CUDA)
//   zenith_bench_suite --smoke      tiny sizes on the CPU, eager against Zenith only, no Python
//                                   files; exits 1 unless every case matched eager (the CI test)
// The results file is rewritten after every case, so a run stopped early still leaves what it did.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include <torch/cuda.h>

#include "case_spec.h"
#include "context.h"
#include "fresh_cache_folder.h"
#include "report_errors.h"
#include "result.h"
#include "workloads.h"

namespace {

using namespace zenith::bench;

struct Arguments {
  std::string cases = ZENITH_BENCH_CASES;
  std::string dir;
  std::string out;
  std::set<std::string> only;
  std::set<std::string> modes = {"torchscript", "zenith", "aoti"};
  double seconds = 1.0;
  double budget_s = 0;
  bool smoke = false;
  bool tiny = false;
  int memory_trace_calls = 0;
  bool memory_history = false;
  int profile_calls = 0;
};

std::set<std::string> split(const std::string& list) {
  std::set<std::string> items;
  std::stringstream stream(list);
  for (std::string item; std::getline(stream, item, ',');) {
    if (!item.empty()) items.insert(item);
  }
  return items;
}

Arguments parse(int argc, char** argv) {
  Arguments a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(flag + " needs a value");
      return argv[++i];
    };
    if (flag == "--cases") a.cases = value();
    else if (flag == "--dir") a.dir = value();
    else if (flag == "--out") a.out = value();
    else if (flag == "--only") a.only = split(value());
    else if (flag == "--modes") a.modes = split(value());
    else if (flag == "--seconds") a.seconds = std::stod(value());
    else if (flag == "--budget-s") a.budget_s = std::stod(value());
    else if (flag == "--smoke") a.smoke = true;
    else if (flag == "--tiny") a.tiny = true;
    else if (flag == "--memory-trace") a.memory_trace_calls = std::stoi(value());
    else if (flag == "--memory-history") a.memory_history = true;
    else if (flag == "--profile") a.profile_calls = std::stoi(value());
    else throw std::runtime_error("unknown argument " + flag + " (see the comment at the top of bench/suite/main.cpp)");
  }
  if (a.smoke) {
    a.tiny = true;
    a.modes = {"zenith"};
    a.dir.clear();
  } else if (a.memory_history && a.memory_trace_calls <= 0) {
    throw std::runtime_error("--memory-history records the calls --memory-trace N watches: give N as well");
  } else if (a.profile_calls < 0) {
    throw std::runtime_error("--profile N: expected a number of calls of 1 or more (0 is off), got " +
                             std::to_string(a.profile_calls));
  } else if (a.dir.empty()) {
    throw std::runtime_error("--dir FOLDER (prepare.py's output) is required unless --smoke");
  }
  return a;
}

void write_results(const std::string& path, const nlohmann::json& rows) {
  if (path.empty()) return;
  std::ofstream out(path);
  out << nlohmann::json{{"results", rows}}.dump(1) << "\n";
}

int run(int argc, char** argv) {
  const Arguments args = parse(argc, argv);
  // A kernel cache folder of this run's own, set before the first compile loads the plugins: cold
  // compiles are this run's, and new files in it count NVRTC compiles.
  const FreshFolder cache("zenith-bench-suite");
  setenv("ZENITH_CACHE_DIR", cache.path.c_str(), 1);

  Context context;
  context.smoke = args.tiny;
  context.device = !args.smoke && torch::cuda::is_available() ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  context.dir = args.dir;
  context.modes = args.modes;
  context.seconds_per_mode = args.tiny ? 0 : args.seconds;
  context.kernel_cache_dir = cache.path;
  context.memory_trace_calls = args.memory_trace_calls;
  context.memory_history = args.memory_history;
  if (args.profile_calls > 0 && !context.device.is_cuda()) {
    throw std::runtime_error("--profile times kernels on a CUDA device, and this run has none (" +
                             std::string(args.smoke ? "--smoke runs on the CPU" : "no CUDA device found") +
                             "): leave --profile out, or run on a GPU machine");
  }
  context.profile_calls = args.profile_calls;
  if (args.budget_s > 0) {
    context.deadline = std::chrono::steady_clock::now() +
                       std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(args.budget_s));
  }
  torch::manual_seed(0);

  nlohmann::json rows = nlohmann::json::array();
  int failures = 0;
  for (const auto& spec : load_cases(args.cases, args.tiny)) {
    if (!args.only.empty() && !args.only.count(spec.name) && !args.only.count(spec.workload)) continue;
    const auto start = std::chrono::steady_clock::now();
    for (const auto& r : run_case(context, spec)) {
      rows.push_back(to_json(r));
      if (r.status != "ok") ++failures;
      std::fprintf(stderr, "[suite] %-24s %-18s %-7s %9.3f ms  err %.2e%s%s\n", spec.name.c_str(), r.mode.c_str(),
                   r.status.c_str(), r.median_ms, r.max_rel_error, r.error.empty() ? "" : "  ", r.error.substr(0, 300).c_str());
    }
    std::fprintf(stderr, "[suite] %s took %.1f s\n", spec.name.c_str(),
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    write_results(args.out, rows);
  }
  if (args.smoke) std::printf("bench smoke: %zu results, %d not ok\n", rows.size(), failures);
  return args.smoke && failures > 0 ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) { return zenith::bench::run_reporting_errors(argc, argv, run); }
