// Replay profiles (CompileOptions::profile_dir, ZENITH_PROFILE_DIR): a compiled module writes one
// trace per signature with a span per plan step of each profiled run, the trace-event JSON that
// Perfetto opens; profiling changes no result. The GPU side (device spans) is in
// tests/gpu/test_profile_cuda.cpp.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include <torch/torch.h>

#include "common/fresh_inputs.h"
#include "common/temp_folder.h"
#include "core/dump.h"
#include "runtime/replay_profile.h"
#include "zenith/compile.h"

namespace zenith {
namespace {
namespace fs = std::filesystem;

using nlohmann::json;
using zenith::testing::remove_folder;

struct SmallMlpImpl : torch::nn::Module {
  SmallMlpImpl() : first(register_module("first", torch::nn::Linear(8, 16))),
                   second(register_module("second", torch::nn::Linear(16, 4))) {}
  torch::Tensor forward(torch::Tensor x) { return second(torch::gelu(first(x)) * 0.5 + 1.0).tanh(); }
  torch::nn::Linear first, second;
};
TORCH_MODULE(SmallMlp);

class ReplayProfileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    folder_ = fs::temp_directory_path() / ("zenith-test-profile-" + std::to_string(::getpid()));
    remove_folder(folder_);
  }
  void TearDown() override { remove_folder(folder_); }

  std::vector<fs::path> files_ending(const std::string& suffix) const {
    std::vector<fs::path> found;
    if (!fs::is_directory(folder_)) return found;
    for (const auto& entry : fs::directory_iterator(folder_)) {
      const auto name = entry.path().filename().string();
      if (name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
        found.push_back(entry.path());
      }
    }
    return found;
  }

  fs::path folder_;
};

// The spans of one kind: those of plan steps (args.step) or of whole runs (cat "run").
std::vector<json> spans(const json& trace, bool steps) {
  std::vector<json> found;
  for (const auto& event : trace.at("traceEvents")) {
    if (event.at("ph") != "X") continue;
    if (steps == event.at("args").contains("step")) found.push_back(event);
  }
  return found;
}

TEST_F(ReplayProfileTest, EachProfiledRunHasOneSpanPerPlanStep) {
  torch::manual_seed(3);
  torch::NoGradGuard no_grad;
  SmallMlp model;
  CompileOptions options;
  options.name = "mlp";
  options.profile_dir = folder_.string();
  options.profile_calls = 2;
  options.dump_dir = folder_.string();  // its steps are the plan's
  auto fast = compile(model, options);
  // The capture, then four plan runs of which the first two are profiled; every call on fresh
  // values must still match eager (1e-5: the CPU plugin runs the same ATen kernels in float32).
  for (int call = 0; call < 5; ++call) {
    auto x = torch::randn({3, 8});
    auto expected = model(x);
    auto actual = fast(x);
    EXPECT_TRUE(torch::allclose(actual, expected, 1e-5, 1e-5)) << zenith::testing::call_name(call);
  }
  auto traces = files_ending(".trace.json");
  ASSERT_EQ(traces.size(), 1u) << "one trace per signature";
  EXPECT_EQ(traces[0].filename().string().rfind("mlp-", 0), 0u) << traces[0];
  auto dump = dump_from_json(read_json_file(fast.report().dump_path));
  ASSERT_FALSE(dump.steps.empty());

  auto trace = read_json_file(traces[0].string());
  EXPECT_EQ(trace.at("displayTimeUnit"), "ms");
  auto runs = spans(trace, /*steps=*/false);
  auto steps = spans(trace, /*steps=*/true);
  ASSERT_EQ(runs.size(), 2u) << "profile_calls runs, then no more";
  EXPECT_EQ(steps.size(), 2 * dump.steps.size()) << trace.dump(1);
  for (const auto& step : steps) {
    const auto& args = step.at("args");
    const auto index = args.at("step").get<std::size_t>();
    ASSERT_LT(index, dump.steps.size());
    EXPECT_EQ(step.at("cat"), dump.steps[index].backend);
    EXPECT_EQ(args.at("group").get<std::vector<int>>(), dump.steps[index].nodes);
    EXPECT_FALSE(step.at("name").get<std::string>().empty());
    EXPECT_GE(step.at("ts").get<double>(), 0.0);
    EXPECT_GE(step.at("dur").get<double>(), 0.0);
    EXPECT_EQ(step.at("tid"), 0) << "CPU steps have no device track";
    EXPECT_FALSE(args.contains("device_us"));
  }
  // The CPU plugin names a kernel after all its ops (zn_compile_args.kernel_name); a view op on the
  // host is named after itself.
  for (const auto& step : steps) {
    std::string ops;
    for (const auto& op : step.at("args").at("ops")) ops += (ops.empty() ? "" : "+") + op.get<std::string>();
    EXPECT_EQ(step.at("name"), ops) << step.dump();
  }
  // A run encloses its steps: to a nanosecond, since ts + dur rounds (a run's dur is end - ts).
  for (const auto& step : steps) {
    const auto& run = runs[step.at("args").at("run") == runs[0].at("name") ? 0 : 1];
    EXPECT_LE(run.at("ts").get<double>(), step.at("ts").get<double>());
    EXPECT_GE(run.at("ts").get<double>() + run.at("dur").get<double>() + 1e-3,
              step.at("ts").get<double>() + step.at("dur").get<double>());
  }
}

TEST_F(ReplayProfileTest, TheEnvironmentTurnsProfilingOn) {
  torch::manual_seed(4);
  torch::NoGradGuard no_grad;
  SmallMlp model;
  ::setenv("ZENITH_PROFILE_DIR", folder_.string().c_str(), 1);
  auto fast = compile(model);
  ::unsetenv("ZENITH_PROFILE_DIR");
  for (int call = 0; call < 2; ++call) fast(torch::randn({2, 8}));
  EXPECT_EQ(files_ending(".trace.json").size(), 1u);
}

TEST_F(ReplayProfileTest, WithoutAFolderNothingIsWritten) {
  torch::manual_seed(5);
  torch::NoGradGuard no_grad;
  SmallMlp model;
  auto fast = compile(model);
  for (int call = 0; call < 2; ++call) fast(torch::randn({2, 8}));
  EXPECT_FALSE(fs::exists(folder_));
}

TEST_F(ReplayProfileTest, ProfileCallsBelowOneIsRefused) {
  SmallMlp model;
  CompileOptions options;
  options.profile_calls = 0;
  try {
    compile(model, options);
    FAIL() << "profile_calls 0 was accepted";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("profile_calls"), std::string::npos) << error.what();
  }
}

// Plugins older than ABI 1.5 name no kernel: the profile names the step after its ops.
TEST(StepName, AStepWithoutAKernelNameIsNamedAfterItsFirstOps) {
  Plan plan;
  for (const char* op : {"aten::mul", "aten::add", "aten::relu", "aten::sigmoid", "aten::exp", "aten::neg"}) {
    ir::Node node;
    node.op = op;
    plan.graph.nodes.push_back(node);
  }
  Step step;
  step.nodes = {0, 1, 2, 3, 4, 5};
  EXPECT_EQ(step_name(plan, step), "aten::mul+aten::add+aten::relu+aten::sigmoid+2 more");
  step.nodes = {2};
  EXPECT_EQ(step_name(plan, step), "aten::relu");
}

TEST(ReplayProfileJson, DeviceTimingsGetATrackOfTheirOwn) {
  Plan plan;
  ir::Node node;
  node.op = "aten::relu";
  plan.graph.nodes.push_back(node);
  Step step;
  step.backend = "jit_cuda";
  step.nodes = {0};
  step.device = c10::Device(c10::kCUDA, 0);
  plan.steps.push_back(step);
  ReplayProfile profile("model");
  StepTiming timing;
  timing.host_start_us = 10;
  timing.host_us = 4;
  timing.device_start_us = 12;
  timing.device_us = 30;
  profile.add_run(plan, {timing}, "run 1");
  auto trace = profile.to_json();
  auto steps = spans(trace, /*steps=*/true);
  ASSERT_EQ(steps.size(), 2u) << "the host's span and the device's";
  EXPECT_EQ(steps[0].at("tid"), 1);
  EXPECT_EQ(steps[0].at("ts"), 12.0);
  EXPECT_EQ(steps[0].at("dur"), 30.0);
  EXPECT_EQ(steps[1].at("tid"), 0);
  auto runs = spans(trace, /*steps=*/false);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].at("ts"), 10.0);
  EXPECT_EQ(runs[0].at("dur"), 32.0) << "the run lasts until its device work ends";
  bool named = false;
  for (const auto& event : trace.at("traceEvents")) {
    if (event.at("ph") == "M" && event.at("tid") == 1) named = event.at("args").at("name") == "cuda:0";
  }
  EXPECT_TRUE(named) << trace.dump(1);
}

}  // namespace
}  // namespace zenith
