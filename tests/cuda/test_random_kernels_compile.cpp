// The CUDA code generators on random programs, without a GPU (CI has none): each seeded program
// (tests/common/random_program.h) is captured on the CPU the way zenith::compile captures a
// callable, its values retyped to CUDA, optimized by the default pipeline and cut into groups the
// way partitioning cuts them; every group gets a kernel or a reason, and every kernel compiles
// with NVRTC for sm_90. The same for random attention (tests/common/random_attention.h): its
// rewrites run as they would on CUDA, and every decode-sized attention gets the attention kernel.
// Numerics are checked on the GPU (tests/gpu/test_random_fusion.cpp).
#include <gtest/gtest.h>

#include <chrono>
#include <iostream>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "common/cuda_kernel_check.h"
#include "common/program_capture.h"
#include "common/random_attention.h"
#include "common/random_program.h"

namespace zenith::cuda {
namespace {

constexpr int kPrograms = 200;
constexpr int kAttentionPrograms = 150;  // as many as the GPU test runs

// The same spread over dtypes as the GPU test, so that seed N is the same program in both.
c10::ScalarType dtype_of(int seed) {
  const c10::ScalarType dtypes[] = {at::kFloat, at::kHalf, at::kBFloat16};
  return dtypes[seed % 3];
}

TEST(RandomKernels, EveryGroupOfRandomProgramsGeneratesAndCompiles) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  testing::KernelTally tally;
  for (int seed = 0; seed < kPrograms; ++seed) {
    auto program = testing::make_random_program(static_cast<std::uint64_t>(seed), dtype_of(seed), at::kCPU);
    const std::string where =
        "seed " + std::to_string(seed) + ", " + c10::toString(program.dtype) + "\n" + program.description;
    auto captured = testing::capture_program(program);
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

TEST(RandomKernels, RandomAttentionGeneratesAndCompiles) {
  testing::KernelTally tally;
  for (int seed = 0; seed < kAttentionPrograms; ++seed) {
    auto program = testing::make_random_attention(static_cast<std::uint64_t>(seed), dtype_of(seed), at::kCPU);
    const std::string where = "seed " + std::to_string(seed) + "\n" + program.description;
    auto captured = testing::capture_program(program);
    if (!captured.unsupported.empty()) {
      ADD_FAILURE() << "capture: " << captured.unsupported << "\n" << where;
      continue;
    }
    testing::check_cuda_kernels(std::move(captured.graph), where, tally);
  }
  std::cout << "random attention kernels: " << kAttentionPrograms << " programs; " << tally.to_string();
  // Written out or not, each program holds one attention once its rewrites ran; about half are
  // decode-sized (at most 16 query rows per key-value head) with a head dim the kernel takes. Far
  // fewer would mean that the fusion stopped matching or the kernel stopped accepting them.
  EXPECT_GE(tally.attention_singles, kAttentionPrograms / 2);
  EXPECT_GE(tally.attention_generated, kAttentionPrograms / 5);
}

}  // namespace
}  // namespace zenith::cuda
