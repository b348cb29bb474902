// The CUDA code generators on random programs, without a GPU (CI has none): each seeded program
// (tests/common/random_program.h) is captured on the CPU the way zenith::compile captures a
// callable, its values retyped to CUDA, optimized by the default pipeline and cut into groups the
// way partitioning cuts them; every group gets a kernel or a reason, and every kernel compiles
// with NVRTC for sm_90. The same for random attention (tests/common/random_attention.h): its
// rewrites run as they would on CUDA, and every decode-sized attention gets the attention kernel;
// and for random convolution blocks and projections (tests/common/random_convolution.h,
// random_projection.h).
// Numerics are checked on the GPU (tests/gpu/test_random_fusion.cpp).
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "common/cuda_kernel_check.h"
#include "common/program_checks.h"
#include "common/random_attention.h"
#include "common/random_convolution.h"
#include "common/random_projection.h"
#include "common/random_program.h"
#include "common/seed_offset.h"

namespace zenith::cuda {
namespace {

constexpr int kPrograms = 200;
constexpr int kAttentionPrograms = 150;    // as many as the GPU test runs
constexpr int kConvolutionPrograms = 120;  // likewise
constexpr int kProjectionPrograms = 150;   // likewise

// Every program of `make` for seeds below `programs`, captured on the CPU and offered to the
// generators as a CUDA capture would be; the tally and the time it took printed under `family`.
testing::KernelTally tally_family(const char* family, int programs,
                                  const std::function<testing::RandomProgram(std::uint64_t, c10::ScalarType)>& make) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  testing::KernelTally tally;
  const int first = testing::first_seed();
  for (int seed = first; seed < first + programs; ++seed) {
    auto program = make(static_cast<std::uint64_t>(seed), testing::dtype_for_seed(seed));
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
  std::cout << family << ": " << programs << " programs; " << tally.to_string() << seconds << " s in all\n";
  return tally;
}

TEST(RandomKernels, EveryGroupOfRandomProgramsGeneratesAndCompiles) {
  const auto tally = tally_family("random kernels", kPrograms, [](std::uint64_t seed, c10::ScalarType dtype) {
    return testing::make_random_program(seed, dtype, at::kCPU);
  });
  // Most programs have something to fuse; fewer groups would mean the fusion pass stopped
  // proposing them and everything above checked little.
  EXPECT_GE(tally.fusion_groups, kPrograms / 2);
  // The fusion pass only proposes what one kernel can run, and these programs hold only ops the
  // generators know: every group must generate (the declined reasons are printed above).
  EXPECT_EQ(tally.fusion_generated, tally.fusion_groups)
      << tally.fusion_generated << " of " << tally.fusion_groups << " fusion groups generated";
}

TEST(RandomKernels, RandomAttentionGeneratesAndCompiles) {
  const auto tally = tally_family("random attention kernels", kAttentionPrograms,
                                  [](std::uint64_t seed, c10::ScalarType dtype) {
                                    return testing::make_random_attention(seed, dtype, at::kCPU);
                                  });
  // Written out or not, each program holds one attention once its rewrites ran; about half are
  // decode-sized (at most 16 query rows per key-value head) with a head dim the kernel takes. Far
  // fewer would mean that the fusion stopped matching or the kernel stopped accepting them.
  EXPECT_GE(tally.attention_singles, kAttentionPrograms / 2);
  EXPECT_GE(tally.attention_generated, kAttentionPrograms / 5);
}

// Convolution blocks: the batch norms as arithmetic, the activations, residual adds and averages
// after the convolutions in fusion groups, every one of which generates.
TEST(RandomKernels, RandomConvolutionGroupsGenerateAndCompile) {
  const auto tally = tally_family("random convolution kernels", kConvolutionPrograms,
                                  [](std::uint64_t seed, c10::ScalarType dtype) {
                                    return testing::make_random_convolution(seed, dtype, at::kCPU);
                                  });
  EXPECT_GE(tally.fusion_groups, kConvolutionPrograms / 2);
  EXPECT_EQ(tally.fusion_generated, tally.fusion_groups)
      << tally.fusion_generated << " of " << tally.fusion_groups << " fusion groups generated";
}

// Projections: what follows the products (activations cuBLASLt has no epilogue for, SwiGLU,
// sums, residual adds, norms) in fusion groups, every one of which generates; the products
// themselves are cuBLASLt's (counted, not compiled: a product with a bias or activation it takes
// as an epilogue is a group; one alone is not).
TEST(RandomKernels, RandomProjectionGroupsGenerateAndCompile) {
  const auto tally = tally_family("random projection kernels", kProjectionPrograms,
                                  [](std::uint64_t seed, c10::ScalarType dtype) {
                                    return testing::make_random_projection(seed, dtype, at::kCPU);
                                  });
  EXPECT_GE(tally.matmul_groups, kProjectionPrograms / 2);
  EXPECT_EQ(tally.fusion_generated, tally.fusion_groups)
      << tally.fusion_generated << " of " << tally.fusion_groups << " fusion groups generated";
}

}  // namespace
}  // namespace zenith::cuda
