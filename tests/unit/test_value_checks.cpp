// Graph breaks at data reads: a forward that reads its own data into C++ (`.item()`, `at::equal`)
// compiles, with the read replaced by a check of the value read at capture. Every case compares
// against eager on fresh inputs: calls whose read value recurs are served by the plan, calls whose
// value differs run eagerly (and say so), and what cannot be checked safely runs eagerly with why.
#include <gtest/gtest.h>

#include <filesystem>

#include <unistd.h>

#include <torch/script.h>
#include <torch/torch.h>

#include "common_relative_error.h"
#include "common/temp_folder.h"
#include "core/dump.h"
#include "zenith/compile.h"

namespace zenith {
namespace {

using testing::relative_error;

// The CPU plugin runs ATen's kernels in eager's order: 1e-6 of the largest value leaves room for a
// vectorized kernel's other summation order and nothing more; a wrong branch is off by order one.
constexpr double kTolerance = 1e-6;

// Chooses an activation by a flag the caller passes as a tensor, as scripted models do with masks
// and modes: ops before the read (its tensor is computed), ops after it (they hold for its value).
at::Tensor by_flag(const at::Tensor& x, const at::Tensor& flag) {
  auto scaled = x * 2 + 1;
  auto chosen = (flag.sum() > 0).item<bool>() ? scaled.relu() : scaled.tanh();
  return chosen * 3 - x;
}

TEST(ValueChecks, ARecurringReadCompilesAndAnotherValueRunsEagerly) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(11);
  CompileOptions options;
  const auto folder = std::filesystem::temp_directory_path() / ("zenith-checks-" + std::to_string(::getpid()));
  options.dump_dir = folder.string();
  auto fast = compile([](at::Tensor x, at::Tensor flag) { return by_flag(x, flag); }, options);
  auto on = torch::ones({2}, at::kLong), off = torch::zeros({2}, at::kLong);
  for (int call = 0; call < 3; ++call) {
    auto x = torch::randn({4, 8});
    EXPECT_LT(relative_error(fast(x, on), by_flag(x, on)), kTolerance) << "call " << call;
  }
  auto report = fast.report();
  EXPECT_FALSE(report.eager_fallback) << report.fallback_reason;
  ASSERT_EQ(report.value_checks.size(), 1u);
  EXPECT_NE(report.value_checks[0].find("aten::item of bool[]"), std::string::npos) << report.value_checks[0];
  EXPECT_NE(report.to_string().find("value checks: 1 data reads"), std::string::npos) << report.to_string();
  auto dump = dump_from_json(read_json_file(report.dump_path));
  testing::remove_folder(folder);
  EXPECT_EQ(dump.report.value_checks, report.value_checks);
  EXPECT_EQ(dump.optimized.outputs.size(), 2u) << "the result, then the checked value";
  EXPECT_EQ(fast.stats().hits, 2);
  EXPECT_EQ(fast.stats().eager_calls, 0) << "the value read recurred";

  auto x = torch::randn({4, 8});
  EXPECT_LT(relative_error(fast(x, off), by_flag(x, off)), kTolerance) << "the other branch, run eagerly";
  EXPECT_EQ(fast.stats().value_check_failures, 1);
  EXPECT_EQ(fast.stats().eager_calls, 1);
  x = torch::randn({4, 8});
  EXPECT_LT(relative_error(fast(x, on), by_flag(x, on)), kTolerance) << "back to the plan";
  EXPECT_EQ(fast.stats().eager_calls, 1);
}

// The read is an argument itself: checked before the plan's first step.
at::Tensor first_columns(const at::Tensor& x, const at::Tensor& count) {
  return x.narrow(1, 0, count.item<std::int64_t>()).exp() + 1;
}

TEST(ValueChecks, AnArgumentReadDirectlyIsCheckedBeforeTheFirstStep) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(12);
  auto fast = compile([](at::Tensor x, at::Tensor count) { return first_columns(x, count); });
  for (std::int64_t n : {3, 3, 3, 5, 3}) {
    auto x = torch::randn({2, 6});
    auto count = torch::scalar_tensor(n, at::kLong);
    auto got = fast(x, count);
    auto want = first_columns(x, count);
    ASSERT_EQ(got.sizes(), want.sizes()) << "count " << n;
    EXPECT_LT(relative_error(got, want), kTolerance) << "count " << n;
  }
  ASSERT_EQ(fast.report().value_checks.size(), 1u);
  EXPECT_NE(fast.report().value_checks[0].find("before the first step"), std::string::npos)
      << fast.report().value_checks[0];
  EXPECT_EQ(fast.stats().value_check_failures, 1) << "count 5";
  EXPECT_EQ(fast.stats().hits, 4);
}

// A value that changes at every call (a sum of fresh floats): correct every time, and after a few
// failed checks in a row the signature stops trying its plan.
at::Tensor by_sign(const at::Tensor& x) { return x * (x.sum().item<double>() > 0 ? 2.0 : -1.0); }

TEST(ValueChecks, AValueThatChangesEveryCallEndsUpEager) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(13);
  auto fast = compile([](at::Tensor x) { return by_sign(x); });
  constexpr int kCalls = 7;
  for (int call = 0; call < kCalls; ++call) {
    auto x = torch::randn({3, 5});
    EXPECT_LT(relative_error(fast(x), by_sign(x)), kTolerance) << "call " << call;
  }
  EXPECT_FALSE(fast.report().eager_fallback);
  EXPECT_EQ(fast.stats().value_check_failures, 3) << "then the plan is no longer tried";
  EXPECT_EQ(fast.stats().eager_calls, kCalls - 1) << "every call after the capture";
}

TEST(ValueChecks, AReadInAForwardThatWritesItsArgumentRunsEagerly) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(14);
  auto fn = [](at::Tensor x, at::Tensor counter) {
    counter.add_(1);
    return x * counter.item<double>();
  };
  auto fast = compile(fn);
  auto mine = torch::zeros({}), theirs = torch::zeros({});
  for (int call = 0; call < 3; ++call) {
    auto x = torch::randn({4});
    EXPECT_LT(relative_error(fast(x, mine), fn(x, theirs)), kTolerance) << "call " << call;
  }
  EXPECT_EQ(mine.item<double>(), 3) << "written once a call, as eager writes it";
  auto report = fast.report();
  EXPECT_TRUE(report.eager_fallback);
  EXPECT_NE(report.fallback_reason.find("has an effect the caller sees"), std::string::npos) << report.fallback_reason;
}

TEST(ValueChecks, AReadOfALargeTensorRunsEagerly) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(15);
  auto fn = [](at::Tensor x, at::Tensor y) { return torch::equal(x.sign(), y.sign()) ? x + y : x - y; };
  auto fast = compile(fn);
  for (int call = 0; call < 3; ++call) {
    auto x = torch::randn({100}), y = torch::randn({100});
    EXPECT_LT(relative_error(fast(x, y), fn(x, y)), kTolerance) << "call " << call;
  }
  EXPECT_TRUE(fast.report().eager_fallback);
  EXPECT_NE(fast.report().fallback_reason.find("a tensor of 100 elements"), std::string::npos)
      << fast.report().fallback_reason;
}

TEST(ValueChecks, ATrainingCallWithAReadRunsEagerlyGradientsIncluded) {
  torch::manual_seed(16);
  auto fast = compile([](at::Tensor x, at::Tensor flag) { return by_flag(x, flag); });
  auto flag = torch::ones({1}, at::kLong);
  for (int call = 0; call < 2; ++call) {  // the capture, then the signature's eager runs
    auto x = torch::randn({3, 4}, torch::requires_grad());
    fast(x, flag).sum().backward();
    auto want = x.detach().clone().requires_grad_(true);
    by_flag(want, flag).sum().backward();
    EXPECT_LT(relative_error(x.grad(), want.grad()), kTolerance) << "call " << call;
  }
  EXPECT_TRUE(fast.report().eager_fallback);
  EXPECT_NE(fast.report().fallback_reason.find("training plans have no value checks"), std::string::npos)
      << fast.report().fallback_reason;
}

// A guarded read of one argument does not hide data read from another where the tracer cannot see
// it (an accessor, not the dispatcher): the perturbed-arguments check still changes that one.
TEST(ValueChecks, UnseenDataInAnotherArgumentStillRunsEagerly) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(17);
  auto fn = [](at::Tensor flag, at::Tensor y) {
    auto scale = flag.item<double>();
    auto first = y.accessor<float, 1>()[0];
    return y * scale + first;
  };
  auto fast = compile(fn);
  auto flag = torch::full({}, 2.0);
  for (int call = 0; call < 3; ++call) {
    auto y = torch::randn({6});
    EXPECT_LT(relative_error(fast(flag, y), fn(flag, y)), kTolerance) << "call " << call;
  }
  EXPECT_TRUE(fast.report().eager_fallback);
  EXPECT_NE(fast.report().fallback_reason.find("passed other arguments for other argument values"), std::string::npos)
      << fast.report().fallback_reason;
}

// A scripted module branching on its data, as TorchScript code does with `if mask.any():`.
TEST(ValueChecks, AScriptedBranchOnDataCompilesPerBranchValue) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(18);
  torch::jit::Module scripted("Branchy");
  scripted.register_parameter("w", torch::randn({8, 8}), false);
  scripted.define(R"(
    def forward(self, x, mask):
        h = torch.matmul(x, self.w)
        if bool(mask.any()):
            h = h.masked_fill(mask, 0.0)
        return torch.relu(h) + 1
  )");
  scripted.eval();
  auto fast = compile(scripted);
  auto call = [&](const at::Tensor& x, const at::Tensor& mask) {
    auto got = fast({x, mask}).toTensor();
    auto want = scripted.forward({x, mask}).toTensor();
    return relative_error(got, want);
  };
  auto none = torch::zeros({4, 8}, at::kBool);
  for (int k = 0; k < 3; ++k) EXPECT_LT(call(torch::randn({4, 8}), none), 1e-5) << "no mask, call " << k;
  EXPECT_FALSE(fast.report().eager_fallback) << fast.report().fallback_reason;
  EXPECT_EQ(fast.report().value_checks.size(), 1u);
  EXPECT_EQ(fast.stats().eager_calls, 0);
  auto some = torch::rand({4, 8}) > 0.5;
  EXPECT_LT(call(torch::randn({4, 8}), some), 1e-5) << "a mask: the other branch, eagerly";
  EXPECT_EQ(fast.stats().value_check_failures, 1);
  EXPECT_LT(call(torch::randn({4, 8}), none), 1e-5) << "no mask again: the plan";
  EXPECT_EQ(fast.stats().eager_calls, 1);
}

}  // namespace
}  // namespace zenith
