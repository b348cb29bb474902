// Plans compute, never remember: a capture holding data the tracer did not see being computed runs
// eagerly with a warning naming it, a TorchScript module's own fusion groups are traced through,
// and real constants still compile. Every case compares against eager on several fresh inputs of
// one signature: the first call (the capture) and later ones (the plan, or the eager fallback).
#include <gtest/gtest.h>

#include <ATen/TracerMode.h>
#include <torch/csrc/jit/codegen/fuser/interface.h>
#include <torch/csrc/jit/passes/tensorexpr_fuser.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/csrc/jit/tensorexpr/kernel.h>
#include <torch/script.h>
#include <torch/torch.h>

#include "capture/unseen_data.h"
#include "common_relative_error.h"
#include "zenith/compile.h"

namespace zenith {
namespace {

using testing::relative_error;

constexpr int kCalls = 3;  // the capture and two replays, each on fresh values

// Calls `fast` and `eager` on `kCalls` fresh standard-normal inputs of one signature. The
// tolerance: where Zenith falls back the same ATen kernels run on the same values; where it
// compiles, the CPU plugin runs them through the dispatcher in the same order. 1e-6 of the largest
// value leaves room for a vectorized kernel's other summation order and nothing more; a stale
// value is off by order one.
template <typename Fast, typename Eager>
void expect_computed(Fast& fast, Eager&& eager, std::vector<std::int64_t> sizes) {
  for (int call = 0; call < kCalls; ++call) {
    auto x = torch::randn(sizes);
    auto want = eager(x);
    auto got = fast(x);
    EXPECT_LT(relative_error(got, want), 1e-6) << "call " << call;
  }
}

at::Tensor exp_through_accessor(const at::Tensor& x) {
  auto y = torch::empty_like(x);
  auto in = x.accessor<float, 2>();
  auto out = y.accessor<float, 2>();
  for (std::int64_t i = 0; i < x.size(0); ++i)
    for (std::int64_t j = 0; j < x.size(1); ++j) out[i][j] = std::exp(in[i][j]);
  return y;
}

TEST(UnseenData, ATensorFilledThroughAnAccessorRunsEagerly) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(1);
  auto fn = [](at::Tensor x) { return exp_through_accessor(x) * 2 + x; };
  auto fast = compile(fn);
  expect_computed(fast, fn, {3, 5});
  auto report = fast.report();
  EXPECT_TRUE(report.eager_fallback);
  EXPECT_NE(report.fallback_reason.find("aten::empty_like"), std::string::npos) << report.fallback_reason;
  EXPECT_NE(report.fallback_reason.find("uninitialized"), std::string::npos) << report.fallback_reason;
  EXPECT_EQ(fast.stats().misses, 1) << "the reason is remembered for the signature";
}

TEST(UnseenData, AResultTheTracerCannotSeeRunsEagerly) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(2);
  // An op run outside the tracer, as a custom kernel without a tracer kernel or a fused kernel of
  // TorchScript's executor runs: the trace records its result as a constant.
  auto fn = [](at::Tensor x) {
    at::Tensor hidden;
    {
      at::tracer::impl::NoTracerDispatchMode untraced;
      hidden = torch::exp(x);
    }
    return hidden * 2 + x;
  };
  auto fast = compile(fn);
  expect_computed(fast, fn, {4, 6});
  auto report = fast.report();
  EXPECT_TRUE(report.eager_fallback);
  EXPECT_NE(report.fallback_reason.find("changed when the arguments changed"), std::string::npos)
      << report.fallback_reason;
  EXPECT_NE(report.fallback_reason.find("aten::mul"), std::string::npos) << "names the op reading it";
}

TEST(UnseenData, WithoutFallbackTheCallFailsWithTheReason) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(3);
  CompileOptions options;
  options.fallback_to_eager = false;
  auto fast = compile([](at::Tensor x) { return exp_through_accessor(x) + 1; }, options);
  try {
    fast(torch::randn({2, 2}));
    FAIL() << "expected zenith::Error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("data_ptr() or an accessor"), std::string::npos) << error.what();
  }
}

TEST(UnseenData, LiteralConstantsStillCompile) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(4);
  // torch::tensor builds its data outside the tracer as well; it is the same every call.
  auto fn = [](at::Tensor x) { return x * torch::tensor({1.0f, -2.0f, 0.5f}) + torch::tensor(0.25f); };
  CompileOptions options;
  options.fallback_to_eager = false;
  auto fast = compile(fn, options);
  expect_computed(fast, fn, {2, 3});
  EXPECT_FALSE(fast.report().eager_fallback);
  EXPECT_EQ(fast.stats().hits, kCalls - 1);
}

TEST(UnseenData, AnUntracedRandomDrawRunsEagerlyAndTheRandomStreamIsKept) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(9);
  // Each call draws new noise outside the tracer: a plan would repeat the first call's.
  auto fn = [](at::Tensor x) {
    at::Tensor noise;
    {
      at::tracer::impl::NoTracerDispatchMode untraced;
      noise = torch::rand_like(x);
    }
    return x + noise;
  };
  auto fast = compile(fn);
  for (int call = 0; call < kCalls; ++call) {
    auto x = torch::randn({3, 3});
    torch::manual_seed(10 + call);
    auto want = fn(x);
    // The same seed: the checking second trace must leave the generator where the call left it.
    torch::manual_seed(10 + call);
    auto got = fast(x);
    auto next_compiled = torch::rand({4});
    EXPECT_LT(relative_error(got, want), 1e-6) << "call " << call;
    torch::manual_seed(10 + call);
    fn(x);
    EXPECT_TRUE(torch::equal(next_compiled, torch::rand({4}))) << "call " << call << ": the random stream after a call is eager's";
  }
  EXPECT_TRUE(fast.report().eager_fallback);
}

struct NormTimesTwoImpl : torch::nn::Module {
  torch::nn::BatchNorm1d norm{nullptr};
  NormTimesTwoImpl() { norm = register_module("norm", torch::nn::BatchNorm1d(4)); }
  // The literal makes the capture hold a constant, so the checking second trace runs.
  torch::Tensor forward(torch::Tensor x) { return norm(x) * torch::tensor(2.0f); }
};
TORCH_MODULE(NormTimesTwo);

TEST(UnseenData, TheCheckingTraceLeavesBatchNormStatisticsAsOneCallLeavesThem) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(5);
  NormTimesTwo eager, compiled;
  for (auto& item : compiled->named_buffers()) item.value().copy_(*eager->named_buffers().find(item.key()));
  for (auto& item : compiled->named_parameters()) item.value().copy_(*eager->named_parameters().find(item.key()));
  CompileOptions options;
  options.fallback_to_eager = false;
  auto fast = compile(compiled, options);
  for (int call = 0; call < kCalls; ++call) {
    auto x = torch::randn({8, 4});
    EXPECT_LT(relative_error(fast(x), eager->forward(x)), 1e-5) << "call " << call;
  }
  // 1e-6: both updated the statistics from the same batches with the same kernels.
  EXPECT_LT(relative_error(compiled->norm->running_mean, eager->norm->running_mean), 1e-6);
  EXPECT_LT(relative_error(compiled->norm->running_var, eager->norm->running_var), 1e-6);
  EXPECT_EQ(compiled->norm->num_batches_tracked.item<std::int64_t>(), kCalls);
}

// Switches TorchScript's tensor-expression fuser on for the CPU, as it is on for CUDA by default,
// and restores the settings.
class CpuFusion {
 public:
  CpuFusion()
      : fuser_(torch::jit::tensorExprFuserEnabled()),
        cpu_(torch::jit::canFuseOnCPU()),
        llvm_(torch::jit::tensorexpr::getTEMustUseLLVMOnCPU()) {
    torch::jit::setTensorExprFuserEnabled(true);
    torch::jit::overrideCanFuseOnCPU(true);
    torch::jit::tensorexpr::getTEMustUseLLVMOnCPU() = false;  // NNC's interpreter where no LLVM
  }
  ~CpuFusion() {
    torch::jit::setTensorExprFuserEnabled(fuser_);
    torch::jit::overrideCanFuseOnCPU(cpu_);
    torch::jit::tensorexpr::getTEMustUseLLVMOnCPU() = llvm_;
  }

 private:
  bool fuser_, cpu_, llvm_;
};

// The failure this file exists for, reproduced on the CPU: a TorchScript module called eagerly
// twice runs an elementwise chain as one fused kernel (prim::TensorExprGroup) that bypasses the
// dispatcher. Traced through `module.forward`, the group's result became a constant.
TEST(UnseenData, TorchScriptFusionGroupsAreTracedOpByOp) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(6);
  CpuFusion fusion;
  torch::jit::Module module("Chain");
  module.register_parameter("scale", torch::randn({5}), /*is_buffer=*/false);
  module.define(R"(
def forward(self, x):
    h = torch.tanh(x * self.scale + 1.0) * x
    return torch.sigmoid(h) - h * 0.5
)");
  module.eval();
  for (int call = 0; call < 2; ++call) module.forward({torch::randn({3, 5})});
  auto executed = torch::jit::lastExecutedOptimizedGraph();
  ASSERT_NE(executed, nullptr);
  std::ostringstream text;
  text << *executed;
  ASSERT_NE(text.str().find("prim::TensorExprGroup"), std::string::npos)
      << "the executor did not fuse; this test needs a fusion group to mean anything:\n" << text.str();

  CompileOptions options;
  options.fallback_to_eager = false;
  auto fast = compile(module, options);
  for (int call = 0; call < kCalls; ++call) {
    auto x = torch::randn({3, 5});
    auto want = module.forward({x}).toTensor();
    auto got = fast({x}).toTensor();
    // The fused kernel evaluates tanh and sigmoid with its own approximations: 1e-5 of the largest
    // value, where a stale result is off by order one.
    EXPECT_LT(relative_error(got, want), 1e-5) << "call " << call;
  }
  EXPECT_FALSE(fast.report().eager_fallback);
  EXPECT_GE(fast.report().nodes_captured, 6) << "mul, add, tanh, mul, sigmoid, mul, sub: every op, no constant";
}

// A value read into C++ that the trace computed from a size alone: evaluated at capture, so the
// plan holds for this signature's sizes and each new size is captured on its own (no symbolic plan).
at::Tensor rows_doubled(const at::Tensor& x) {
  auto rows = (torch::scalar_tensor(x.size(0), at::kLong) * 2).item<std::int64_t>();
  return x.reshape({rows, -1}).relu() * 3;
}

TEST(UnseenData, AValueComputedFromSizesIsReadAtCaptureAndHeldBySizes) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(3);
  CompileOptions options;
  options.fallback_to_eager = false;  // must compile
  auto fast = compile([](at::Tensor x) { return rows_doubled(x); }, options);
  expect_computed(fast, rows_doubled, {4, 6});
  expect_computed(fast, rows_doubled, {2, 6});
  auto report = fast.report();
  EXPECT_FALSE(report.eager_fallback);
  EXPECT_NE(report.static_reason.find("reads 1 values computed from sizes into C++ (aten::item)"), std::string::npos)
      << report.static_reason;
  EXPECT_EQ(fast.stats().eager_calls, 0);
  EXPECT_EQ(fast.stats().misses, 2) << "each size is its own plan";
}

TEST(UnseenData, AValueReadFromRandomNumbersRunsEagerlyAndSaysWhy) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(4);
  // Reads of the call's own data compile with a value check (test_value_checks.cpp); a read of a
  // random draw cannot hold for the next call's draw.
  auto fn = [](at::Tensor x) { return x * (torch::rand({}).item<double>() > 2 ? 2.0 : -1.0); };
  auto fast = compile(fn);
  expect_computed(fast, fn, {3, 5});
  auto report = fast.report();
  EXPECT_TRUE(report.eager_fallback);
  EXPECT_NE(report.fallback_reason.find("aten::item on random numbers (aten::rand)"), std::string::npos)
      << report.fallback_reason;
}

TEST(UnseenData, APerturbedCopyKeepsTheSignatureAndChangesTheValues) {
  torch::manual_seed(7);
  auto x = torch::randn({4, 6}).t();  // transposed: strides kept
  x.requires_grad_(true);
  auto y = capture::perturbed_copy(x, 1);
  EXPECT_EQ(y.sizes(), x.sizes());
  EXPECT_EQ(y.strides(), x.strides());
  EXPECT_EQ(y.scalar_type(), x.scalar_type());
  EXPECT_TRUE(y.requires_grad());
  EXPECT_GT((y - x).abs().min().item<double>(), 0) << "every element differs";
  auto ones = capture::perturbed_copy(torch::ones({16}), 2);
  EXPECT_FALSE(torch::equal(ones, torch::ones({16}))) << "equal elements change too";
  auto ids = torch::arange(10);
  auto shuffled = capture::perturbed_copy(ids, 3);
  EXPECT_FALSE(torch::equal(shuffled, ids));
  EXPECT_TRUE(torch::equal(std::get<0>(shuffled.sort()), ids)) << "integers are shuffled, never made up";
  EXPECT_TRUE(torch::equal(capture::perturbed_copy(ids, 3), shuffled)) << "seeded";
}

}  // namespace
}  // namespace zenith
