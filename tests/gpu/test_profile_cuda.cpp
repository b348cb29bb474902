// Replay profiles on CUDA: the profile a compiled module writes (CompileOptions::profile_dir) and
// the one `zenith-inspect replay --trace` writes for a dump of it hold, per run, one host span per
// plan step and one device span (CUDA events on the step's stream) per kernel step, whose device
// time is positive. Labelled `gpu`; the CPU side is tests/unit/test_replay_profile.cpp.
#include <gtest/gtest.h>

#include <filesystem>

#include <torch/torch.h>

#include "common/fresh_inputs.h"
#include "common/temp_folder.h"
#include "common_relative_error.h"
#include "core/dump.h"
#include "tools/tool_runner.h"
#include "zenith/compile.h"

namespace zenith {
namespace {
namespace fs = std::filesystem;

using nlohmann::json;

constexpr int kProfiledRuns = 2;

struct MlpImpl : torch::nn::Module {
  MlpImpl() : first(register_module("first", torch::nn::Linear(256, 512))),
              second(register_module("second", torch::nn::Linear(512, 128))) {}
  torch::Tensor forward(torch::Tensor x) { return second(torch::gelu(first(x)) * 0.5 + 1.0).tanh(); }
  torch::nn::Linear first, second;
};
TORCH_MODULE(Mlp);

struct Counts {
  std::size_t host = 0, device = 0, runs = 0;
};

// Checks every span of `trace` against `dump`'s steps and counts them.
Counts check_spans(const json& trace, const Dump& dump) {
  Counts counts;
  for (const auto& event : trace.at("traceEvents")) {
    if (event.at("ph") != "X") continue;
    const auto& args = event.at("args");
    if (!args.contains("step")) {
      ++counts.runs;
      continue;
    }
    const auto index = args.at("step").get<std::size_t>();
    EXPECT_LT(index, dump.steps.size());
    if (index >= dump.steps.size()) continue;
    EXPECT_EQ(event.at("cat"), dump.steps[index].backend);
    if (event.at("tid") == 0) {
      ++counts.host;
      continue;
    }
    ++counts.device;
    EXPECT_NE(dump.steps[index].backend, "host") << "a view on the host has no device span";
    EXPECT_GT(args.at("device_us").get<double>(), 0.0) << event.dump();
    EXPECT_EQ(event.at("dur"), args.at("device_us"));
  }
  return counts;
}

std::size_t kernel_steps(const Dump& dump) {
  std::size_t kernels = 0;
  for (const auto& step : dump.steps) kernels += step.backend != "host" ? 1 : 0;
  return kernels;
}

TEST(ProfileCuda, CompiledModuleAndInspectReplayProfileEveryStep) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::NoGradGuard no_grad;
  torch::manual_seed(29);
  auto folder = fs::temp_directory_path() / ("zenith-test-profile-cuda-" + std::to_string(::getpid()));
  zenith::testing::remove_folder(folder);
  Mlp model;
  model->to(torch::kCUDA);
  CompileOptions options;
  options.name = "mlp";
  options.fallback_to_eager = false;
  options.dump_dir = folder.string();
  options.profile_dir = folder.string();
  options.profile_calls = kProfiledRuns;
  auto fast = compile(model, options);
  for (int call = 0; call < kProfiledRuns + 2; ++call) {
    auto x = torch::randn({64, 256}, torch::kCUDA);
    // 1e-4 of the output's scale: the zoo's float32 bound on CUDA (test_zoo_cuda.cpp: CUDA's math
    // functions and one rounding per fused group).
    EXPECT_LT(testing::relative_error(fast(x), model(x)), 1e-4) << zenith::testing::call_name(call);
  }
  const auto dump_path = fast.report().dump_path;
  auto dump = dump_from_json(read_json_file(dump_path));
  ASSERT_GT(kernel_steps(dump), 0u);
  // The profile is named as the dump is: "<name>-<signature hash>".
  auto trace_path = fs::path(dump_path).replace_extension(".trace.json").string();
  ASSERT_TRUE(fs::exists(trace_path)) << trace_path;
  auto counts = check_spans(read_json_file(trace_path), dump);
  EXPECT_EQ(counts.runs, static_cast<std::size_t>(kProfiledRuns));
  EXPECT_EQ(counts.host, kProfiledRuns * dump.steps.size());
  EXPECT_EQ(counts.device, kProfiledRuns * kernel_steps(dump));

  auto replay_trace = (folder / "replay.trace.json").string();
  auto run = tool_tests::run_tool(ZENITH_INSPECT_BIN, {"replay", dump_path, "--trace", replay_trace, "--runs", "3",
                                                       "--path", ZENITH_PLUGIN_DIR});
  // The replay's own verdict is not what this test checks: it draws every parameter from randn, so
  // float32 outputs reach magnitudes where CUDA's rounding exceeds the tool's strict float32 bound
  // (1e-5) and it may exit 1 ("DIFFERS"). It must run and write its profile.
  ASSERT_TRUE(run.exit_code == 0 || run.exit_code == 1) << run.output;
  ASSERT_NE(run.output.find("profile: 3 runs of " + std::to_string(dump.steps.size()) + " steps"), std::string::npos)
      << run.output;
  auto replayed = check_spans(read_json_file(replay_trace), dump);
  EXPECT_EQ(replayed.runs, 3u);
  EXPECT_EQ(replayed.host, 3 * dump.steps.size()) << run.output;
  EXPECT_EQ(replayed.device, 3 * kernel_steps(dump)) << run.output;
  zenith::testing::remove_folder(folder);
}

}  // namespace
}  // namespace zenith
