// The real models' CUDA kernels, without a GPU (CI has none): each model of the suite, exported for
// the CPU, is captured the way zenith::compile captures a TorchScript module, retyped to CUDA,
// optimized and cut into groups as the JIT CUDA backend would be offered them; every group gets a
// kernel or a reason and every kernel compiles with NVRTC for sm_90. A model whose kernels NVRTC
// rejects, or that takes minutes to generate and compile, shows here before it reaches the GPU
// machine. Their numbers are checked there (test_realmodels on CUDA).
//
// Environment: as test_realmodels (ZENITH_REALMODELS_DIR, ZENITH_REALMODELS_ONLY).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>

#include <torch/script.h>
#include <torch/torch.h>

#include "capture/torchscript_forward.h"
#include "capture/tracer_capture.h"
#include "common/cuda_kernel_check.h"
#include "manifest.h"

namespace zenith {
namespace {

using testing::ManifestEntry;

class RealModelKernels : public ::testing::TestWithParam<ManifestEntry> {};

TEST_P(RealModelKernels, EveryGroupGeneratesAndCompiles) {
  const auto& entry = GetParam().json;
  const std::string name = entry.at("name");
  ASSERT_EQ(entry.at("device").get<std::string>(), "cpu") << "captured on the CPU: export the models for the CPU";
  ASSERT_FALSE(entry.contains("export_error")) << name << " did not export: " << entry.at("export_error").get<std::string>();
  torch::manual_seed(7);
  torch::NoGradGuard no_grad;
  const auto started = std::chrono::steady_clock::now();
  auto module = torch::jit::load(GetParam().dir + "/" + entry.at("file").get<std::string>());
  module.eval();
  detail::ModuleAccess access;
  access.forward = capture::unfused_forward(module);
  std::vector<std::pair<std::string, at::Tensor>> state;
  for (const auto& item : module.named_parameters(true)) state.emplace_back(item.name, item.value);
  for (const auto& item : module.named_buffers(true)) state.emplace_back(item.name, item.value);
  auto captured = capture::capture_forward(access, testing::make_inputs(entry.at("inputs"), at::kCPU, at::kFloat), state);
  ASSERT_TRUE(captured.unsupported.empty()) << name << ": " << captured.unsupported;
  const double capture_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();

  testing::KernelTally tally;
  testing::check_cuda_kernels(std::move(captured.graph), name, tally);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::printf("%s: captured in %.2f s; %s%.2f s in all\n", name.c_str(), capture_seconds, tally.to_string().c_str(),
              seconds);
  // Every model of the suite has element-wise work around its matrix products and convolutions.
  EXPECT_GT(tally.fusion_groups + tally.singles_generated, 0) << name << ": nothing was offered to the generators";
  // The fusion pass proposes what one kernel can run: a floating-point group it proposed and no
  // generator takes would run op by op on the GPU (the declined reasons are printed above).
  // Integer groups (position ids computed from a mask) are the generators' known limit.
  EXPECT_EQ(tally.fusion_generated + tally.integer_groups_declined, tally.fusion_groups)
      << name << ": " << tally.to_string();
}

INSTANTIATE_TEST_SUITE_P(Suite, RealModelKernels, ::testing::ValuesIn(testing::manifest_models()),
                         [](const ::testing::TestParamInfo<ManifestEntry>& info) {
                           return info.param.json.at("name").get<std::string>();
                         });
// Without ZENITH_REALMODELS_DIR there are none: test_realmodels' ManifestNamesModels fails and says why.
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(RealModelKernels);

}  // namespace
}  // namespace zenith
