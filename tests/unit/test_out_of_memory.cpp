// Out of memory in the middle of a plan: an allocation that fails gives a zenith::Error that says
// so (or, with CompileOptions::eager_on_out_of_memory, an eager run), nothing half-computed comes
// back, and the compiled module keeps working. The failures come from a CPU allocator that fails
// on request, installed in place of PyTorch's for the test; the CPU allocator's own report of
// exhaustion is recognized too.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <string>

#include <c10/core/CPUAllocator.h>
#include <torch/torch.h>

#include "common/error_message.h"
#include "common_relative_error.h"
#include "runtime/out_of_memory.h"
#include "zenith/compile.h"

namespace zenith {
namespace {

using testing::relative_error;

// The CPU plugin runs eager's ATen kernels in eager's order: 1e-6 of the largest value is rounding.
constexpr double kTolerance = 1e-6;

// PyTorch's CPU allocator, except that once armed it fails the next allocation of at least
// `bytes`, as a device that ran out would (c10::OutOfMemoryError, what CUDA's allocator throws).
class FailingAllocator final : public c10::Allocator {
 public:
  explicit FailingAllocator(c10::Allocator* real) : real_(real) {}
  void fail_next_of_at_least(std::size_t bytes) { armed_bytes_ = bytes; }
  int failures() const { return failures_; }

  c10::DataPtr allocate(std::size_t bytes) override {
    std::size_t armed = armed_bytes_.load();
    if (armed > 0 && bytes >= armed && armed_bytes_.compare_exchange_strong(armed, 0)) {
      ++failures_;
      TORCH_CHECK_WITH(OutOfMemoryError, false, "test allocator: out of memory allocating ", bytes, " bytes");
    }
    return real_->allocate(bytes);
  }
  c10::DeleterFnPtr raw_deleter() const override { return real_->raw_deleter(); }
  void copy_data(void* dest, const void* src, std::size_t count) const override { real_->copy_data(dest, src, count); }

 private:
  c10::Allocator* real_;
  std::atomic<std::size_t> armed_bytes_{0};
  std::atomic<int> failures_{0};
};

// Installs a FailingAllocator as PyTorch's CPU allocator for the test's lifetime.
class OutOfMemory : public ::testing::Test {
 protected:
  static constexpr std::uint8_t kPriority = 200;  // above the default allocator's
  void SetUp() override {
    real_ = c10::GetCPUAllocator();
    failing_ = std::make_unique<FailingAllocator>(real_);
    c10::SetCPUAllocator(failing_.get(), kPriority);
  }
  void TearDown() override { c10::SetCPUAllocator(real_, kPriority); }

  c10::Allocator* real_ = nullptr;
  std::unique_ptr<FailingAllocator> failing_;
};

// An outer product in the middle: the plan's one large allocation (n*n floats) is its intermediate.
at::Tensor outer_tanh(const at::Tensor& x) { return (x.unsqueeze(1) * x.unsqueeze(0)).tanh().sum(1) + 1; }
constexpr std::int64_t kN = 64;
constexpr std::size_t kIntermediateBytes = kN * kN * sizeof(float);

TEST_F(OutOfMemory, APlanThatRunsOutGivesAnErrorAndTheModuleKeepsWorking) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(3);
  CompileOptions options;
  options.name = "outer";
  options.fallback_to_eager = false;
  auto fast = compile(outer_tanh, options);
  for (int call = 0; call < 3; ++call) {  // the capture, then the plan
    auto x = torch::randn({kN});
    EXPECT_LE(relative_error(fast(x), outer_tanh(x)), kTolerance) << "call " << call;
  }
  ASSERT_EQ(fast.stats().eager_calls, 0);

  failing_->fail_next_of_at_least(kIntermediateBytes);
  const std::string message = testing::error_message_of([&] { fast(torch::randn({kN})); });
  EXPECT_EQ(failing_->failures(), 1) << "the plan allocates its intermediate: the armed allocation must have failed";
  EXPECT_NE(message.find("ran out of memory while its plan ran"), std::string::npos) << message;
  EXPECT_NE(message.find("test allocator: out of memory"), std::string::npos) << "the allocator's words: " << message;
  EXPECT_NE(message.find("eager_on_out_of_memory"), std::string::npos) << "what to do: " << message;
  EXPECT_EQ(fast.stats().out_of_memory, 1);

  for (int call = 0; call < 2; ++call) {
    auto x = torch::randn({kN});
    EXPECT_LE(relative_error(fast(x), outer_tanh(x)), kTolerance) << "after the failure, call " << call;
  }
  EXPECT_EQ(fast.stats().eager_calls, 0);
}

TEST_F(OutOfMemory, WithTheOptionTheCallRunsEagerly) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(4);
  CompileOptions options;
  options.name = "outer_eager";
  options.eager_on_out_of_memory = true;
  auto fast = compile(outer_tanh, options);
  for (int call = 0; call < 2; ++call) fast(torch::randn({kN}));

  // Only the plan's allocation fails; the eager run after it finds memory again.
  auto x = torch::randn({kN});
  auto want = outer_tanh(x);
  failing_->fail_next_of_at_least(kIntermediateBytes);
  auto got = fast(x);
  EXPECT_EQ(failing_->failures(), 1);
  EXPECT_LE(relative_error(got, want), kTolerance);
  EXPECT_EQ(fast.stats().out_of_memory, 1);
  EXPECT_EQ(fast.stats().eager_calls, 1);
  auto y = torch::randn({kN});
  EXPECT_LE(relative_error(fast(y), outer_tanh(y)), kTolerance) << "the next call takes the plan again";
  EXPECT_EQ(fast.stats().eager_calls, 1);
}

struct OuterImpl : torch::nn::Module {
  OuterImpl() : scale(register_parameter("scale", torch::randn({kN}))) {}
  at::Tensor forward(const at::Tensor& x) { return outer_tanh(x * scale); }
  at::Tensor scale;
};
TORCH_MODULE(Outer);

TEST_F(OutOfMemory, ATrainingCallThatRunsOutGivesAnErrorAndTheNextOneWorks) {
  torch::manual_seed(5);
  Outer model;
  CompileOptions options;
  options.name = "outer_training";
  options.fallback_to_eager = false;
  auto fast = compile(model, options);
  auto eager = [&](const at::Tensor& x) { return model->forward(x); };
  auto gradient_of = [&](auto&& forward, const at::Tensor& x) {
    model->zero_grad();
    forward(x).sum().backward();
    return model->scale.grad().clone();
  };
  for (int call = 0; call < 3; ++call) {  // the capture, then training calls through the plan
    auto x = torch::randn({kN});
    EXPECT_LE(relative_error(gradient_of(fast, x), gradient_of(eager, x)), kTolerance) << "call " << call;
  }
  ASSERT_GE(fast.stats().training_calls, 1);

  failing_->fail_next_of_at_least(kIntermediateBytes);
  const std::string message = testing::error_message_of([&] { fast(torch::randn({kN})); });
  EXPECT_EQ(failing_->failures(), 1);
  EXPECT_NE(message.find("the training call"), std::string::npos) << message;
  EXPECT_NE(message.find("ran out of memory while its plan ran"), std::string::npos) << message;
  EXPECT_EQ(fast.stats().out_of_memory, 1);

  auto x = torch::randn({kN});
  EXPECT_LE(relative_error(gradient_of(fast, x), gradient_of(eager, x)), kTolerance) << "after the failure";
}

TEST(OutOfMemoryReports, TheAllocatorsReportsAreRecognizedAndNothingElse) {
  // PyTorch's CPU allocator reports exhaustion as a plain c10::Error: a petabyte it cannot map.
  bool recognized = false;
  try {
    auto huge = at::empty({std::int64_t{1} << 48}, at::kFloat);
  } catch (const std::exception& error) {
    recognized = detail::is_out_of_memory(error);
    EXPECT_TRUE(recognized) << error.what();
  }
  EXPECT_TRUE(recognized) << "allocating 1 PiB did not fail";
  try {
    at::ones({2}).view({3});
    ADD_FAILURE() << "a bad view did not throw";
  } catch (const std::exception& error) {
    EXPECT_FALSE(detail::is_out_of_memory(error)) << error.what();
  }
  EXPECT_FALSE(detail::is_out_of_memory(std::runtime_error("can't allocate memory")));
}

}  // namespace
}  // namespace zenith
