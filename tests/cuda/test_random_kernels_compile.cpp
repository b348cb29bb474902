// The CUDA code generators on random programs, without a GPU (CI has none): each seeded program
// (tests/common/random_program.h) is captured on the CPU the way zenith::compile captures a
// callable, its values retyped to CUDA, optimized by the default pipeline and cut into groups the
// way partitioning cuts them; every group gets a kernel or a reason, and every kernel compiles
// with NVRTC for sm_90. Numerics are checked on the GPU (tests/gpu/test_random_fusion.cpp).
#include <gtest/gtest.h>

#include <chrono>
#include <iostream>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "capture/tracer_capture.h"
#include "common/cuda_kernel_check.h"
#include "common/random_program.h"

namespace zenith::cuda {
namespace {

constexpr int kPrograms = 200;

// The same spread over dtypes as the GPU test, so that seed N is the same program in both.
c10::ScalarType dtype_of(int seed) {
  const c10::ScalarType dtypes[] = {at::kFloat, at::kHalf, at::kBFloat16};
  return dtypes[seed % 3];
}

// Captures `program` as compile() captures a callable: one traced eager run, converted to the IR.
capture::Capture capture_program(const testing::RandomProgram& program) {
  detail::ModuleAccess access;
  access.forward = [run = program.run](const std::vector<c10::IValue>& args) {
    std::vector<at::Tensor> tensors;
    for (const auto& arg : args) tensors.push_back(arg.toTensor());
    return c10::IValue(run(tensors));
  };
  std::vector<c10::IValue> args(program.inputs.begin(), program.inputs.end());
  return capture::capture_forward(access, args, {});
}

TEST(RandomKernels, EveryGroupOfRandomProgramsGeneratesAndCompiles) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  testing::KernelTally tally;
  for (int seed = 0; seed < kPrograms; ++seed) {
    auto program = testing::make_random_program(static_cast<std::uint64_t>(seed), dtype_of(seed), at::kCPU);
    const std::string where =
        "seed " + std::to_string(seed) + ", " + c10::toString(program.dtype) + "\n" + program.description;
    auto captured = capture_program(program);
    if (!captured.unsupported.empty()) {
      ADD_FAILURE() << "capture: " << captured.unsupported << "\n" << where;
      continue;
    }
    testing::check_cuda_kernels(std::move(captured.graph), where, tally);
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();

  std::cout << "random kernels: " << kPrograms << " programs; " << tally.to_string() << seconds << " s in all\n";
  // Most programs have something to fuse; fewer groups would mean the fusion pass stopped
  // proposing them and everything above checked little.
  EXPECT_GE(tally.fusion_groups, kPrograms / 2);
  // The fusion pass only proposes what one kernel can run, and these programs hold only ops the
  // generators know: every group must generate (the declined reasons are printed above).
  EXPECT_EQ(tally.fusion_generated, tally.fusion_groups)
      << tally.fusion_generated << " of " << tally.fusion_groups << " fusion groups generated";
}

}  // namespace
}  // namespace zenith::cuda
