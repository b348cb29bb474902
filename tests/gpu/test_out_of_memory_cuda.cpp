// Out of device memory while a plan runs, for real: the CUDA caching allocator is limited to what it
// holds already (setMemoryFraction), so the plan's next allocation fails with PyTorch's
// OutOfMemoryError. The call gives a zenith::Error that says so, nothing of it is returned, and once
// memory is allowed again the same compiled module computes eager's result. Label gpu.
#include <gtest/gtest.h>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include "common/error_message.h"
#include "common_relative_error.h"
#include "gpu/allocator_bytes.h"
#include "gpu/two_layer_mlp.h"
#include "zenith/compile.h"

namespace {

using zenith::testing::Mlp;
using zenith::testing::no_fallback;
using zenith::testing::relative_error;
using zenith::testing::reserved_bytes;

namespace allocator = c10::cuda::CUDACachingAllocator;

// Fused kernels and cuBLASLt against eager's, TF32 off: float32 roundoff through two products of
// width 64 is below 1e-4 of the output's scale; a wrong result is off by order one.
constexpr double kTolerance = 1e-3;
// Rows of a call: its intermediates, 64 floats a row, take 16 MiB each, far above the 2 MiB of
// headroom the limited allocator leaves.
constexpr std::int64_t kRows = 1 << 16;

TEST(OutOfMemoryCuda, APlanThatRunsOutOfDeviceMemoryGivesAnErrorAndTheModuleKeepsWorking) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  at::globalContext().setAllowTF32CuBLAS(false);
  torch::manual_seed(51);
  torch::NoGradGuard no_grad;
  const torch::Device device(torch::kCUDA, c10::cuda::current_device());  // an index: the allocator's calls need one
  Mlp mlp;
  mlp->to(device);
  mlp->eval();
  auto options = no_fallback("device memory");
  options.cuda_graphs = false;  // a replay allocates nothing: the plan must allocate at every call
  auto fast = zenith::compile(mlp, options);
  for (int call = 0; call < 3; ++call) {
    auto x = torch::randn({kRows, 32}, device);
    ASSERT_LT(relative_error(fast(x), mlp->forward(x)), kTolerance) << "call " << call;
  }
  auto x = torch::randn({kRows, 32}, device);
  auto want = mlp->forward(x);
  torch::cuda::synchronize();
  // Only what the allocator holds now, plus 2 MiB: the call's intermediates cannot fit.
  allocator::emptyCache();
  const double total = static_cast<double>(at::cuda::getCurrentDeviceProperties()->totalGlobalMem);
  allocator::setMemoryFraction((reserved_bytes() + (2 << 20)) / total, device.index());
  torch::Tensor got;
  const std::string message = zenith::testing::error_message_of([&] { got = fast(x); });
  allocator::setMemoryFraction(1.0, device.index());
  EXPECT_NE(message.find("ran out of memory"), std::string::npos) << message;
  EXPECT_NE(message.find("still usable"), std::string::npos) << message;
  EXPECT_FALSE(got.defined()) << "nothing of the call is returned";
  EXPECT_EQ(fast.stats().out_of_memory, 1);
  EXPECT_LT(relative_error(fast(x), want), kTolerance) << "the same call once memory is there again";
  auto fresh = torch::randn({kRows, 32}, device);
  EXPECT_LT(relative_error(fast(fresh), mlp->forward(fresh)), kTolerance) << "a fresh input";
}

}  // namespace
