// Derived values (runtime/derived_values.h, CompileOptions::keep_derived_values): what an inference
// plan computes from parameters and buffers alone is computed once and kept, and computed again
// at the first call after a source was updated in place or replaced. Every call is compared with
// eager on a fresh input; the counts say when the kept values were computed.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "common_relative_error.h"
#include "zenith/compile.h"

namespace zenith {
namespace {

using testing::relative_error;

// The CPU plugin runs ATen's kernels in eager's order: 1e-6 of the largest value leaves room for a
// vectorized kernel's other summation order; a stale weight is off by order one.
constexpr double kTolerance = 1e-6;

// `w * 2 + b` reads a parameter and a buffer alone, and a matrix product reads it: a kernel of its
// own whose result the plan keeps. `b.view` is a view of the buffer: kept as a view, never written.
struct ScaledProjectionImpl : torch::nn::Module {
  ScaledProjectionImpl() {
    w = register_parameter("w", torch::randn({16, 8}));
    b = register_buffer("b", torch::randn({8}));
  }
  torch::Tensor forward(const torch::Tensor& x) { return torch::relu(torch::matmul(x, w * 2 + b)) + b.view({1, 8}); }
  torch::Tensor w, b;
};
TORCH_MODULE(ScaledProjection);

CompileOptions strict(bool keep) {
  CompileOptions options;
  options.fallback_to_eager = false;
  options.keep_derived_values = keep;
  options.name = keep ? "kept" : "not-kept";
  return options;
}

class DerivedValues : public ::testing::Test {
 protected:
  void SetUp() override { torch::manual_seed(31); }

  // Three calls on fresh inputs, each compared with eager.
  template <typename Compiled>
  void check(Compiled& fast, ScaledProjection& model, const std::string& what) {
    for (int call = 0; call < 3; ++call) {
      auto x = torch::randn({4, 16});
      EXPECT_LT(relative_error(fast(x), model->forward(x)), kTolerance) << what << ", call " << call;
    }
  }
};

TEST_F(DerivedValues, AreComputedOnceAndMatchEager) {
  torch::NoGradGuard no_grad;
  ScaledProjection model;
  auto fast = compile(model, strict(true));
  check(fast, model, "first three calls");
  check(fast, model, "three more");
  // Call 1 captures (eager's result); calls 2 to 6 run the plan, which computed them at call 2.
  EXPECT_EQ(fast.stats().derived_computations, 1);
  EXPECT_EQ(fast.stats().eager_calls, 0);
  // `w * 2 + b` in memory of its own; the view of the buffer is the buffer's memory, no copy.
  EXPECT_EQ(fast.stats().kept_bytes, 16 * 8 * 4);
  auto off = compile(model, strict(false));
  check(off, model, "nothing kept");
  EXPECT_EQ(off.stats().kept_bytes, 0);
}

TEST_F(DerivedValues, AreComputedAgainAfterAnUpdateInPlaceOrAReplacement) {
  torch::NoGradGuard no_grad;
  ScaledProjection model;
  auto fast = compile(model, strict(true));
  check(fast, model, "before");
  ASSERT_EQ(fast.stats().derived_computations, 1);

  model->w.mul_(3);  // an optimizer's step: the version counter moves
  check(fast, model, "parameter updated in place");
  EXPECT_EQ(fast.stats().derived_computations, 2) << "once for the update, not per call";

  model->b.add_(1);  // the buffer read by the kernel and by the kept view
  check(fast, model, "buffer updated in place");
  EXPECT_EQ(fast.stats().derived_computations, 3);

  model->w.set_data(torch::randn({16, 8}));  // new memory, a new version counter
  check(fast, model, "parameter replaced");
  EXPECT_EQ(fast.stats().derived_computations, 4);

  model->b.copy_(torch::randn({8}));  // load_state_dict's way
  check(fast, model, "buffer loaded");
  EXPECT_EQ(fast.stats().derived_computations, 5);
  EXPECT_EQ(fast.stats().eager_calls, 0);
}

TEST_F(DerivedValues, OffByOptionTheyAreComputedAtEveryCall) {
  torch::NoGradGuard no_grad;
  ScaledProjection model;
  auto fast = compile(model, strict(false));
  check(fast, model, "before");
  model->w.data().mul_(3);  // behind the version counter's back: seen only when nothing is kept
  check(fast, model, "written through .data");
  EXPECT_EQ(fast.stats().derived_computations, 0);
  EXPECT_EQ(fast.stats().eager_calls, 0);
}

TEST_F(DerivedValues, TheSizesOfASymbolicPlanShareThem) {
  torch::NoGradGuard no_grad;
  ScaledProjection model;
  auto options = strict(true);
  options.dynamic_shapes = DynamicShapes::Auto;
  auto fast = compile(model, options);
  for (std::int64_t rows : {4, 4, 5, 6, 7, 8, 9, 10, 6, 9}) {
    auto x = torch::randn({rows, 16});
    EXPECT_LT(relative_error(fast(x), model->forward(x)), kTolerance) << rows << " rows";
  }
  const auto stats = fast.stats();
  ASSERT_EQ(stats.symbolic_plans, 1) << "the row count became symbolic";
  ASSERT_GE(stats.instantiations, 3);
  // The first size's own plan computed them; the symbolic plan and all its sizes take them.
  EXPECT_EQ(stats.derived_computations, 1);
  model->w.mul_(-1);
  for (std::int64_t rows : {7, 8, 9, 4}) {
    auto x = torch::randn({rows, 16});
    EXPECT_LT(relative_error(fast(x), model->forward(x)), kTolerance) << rows << " rows, after an update";
  }
  EXPECT_EQ(fast.stats().derived_computations, 2) << "once for every size and the first size's own plan";
}

TEST_F(DerivedValues, PlansOfTwoSignaturesHoldOneCopy) {
  torch::NoGradGuard no_grad;
  ScaledProjection model;
  auto fast = compile(model, strict(true));
  const std::vector<std::int64_t> sizes = {4, 6};  // two signatures, two plans
  auto check_both = [&](const std::string& what) {
    for (int round = 0; round < 3; ++round) {
      for (auto rows : sizes) {
        auto x = torch::randn({rows, 16});
        EXPECT_LT(relative_error(fast(x), model->forward(x)), kTolerance) << what << ", " << rows << " rows";
      }
    }
  };
  check_both("before");
  EXPECT_EQ(fast.stats().misses, 2);
  EXPECT_EQ(fast.stats().derived_computations, 1) << "the second plan takes what the first computed";
  model->w.mul_(3);
  check_both("after an update in place");
  EXPECT_EQ(fast.stats().derived_computations, 2) << "the first plan to run after the update computes for both";
  model->w.set_data(torch::randn({16, 8}));
  check_both("after a replacement");
  EXPECT_EQ(fast.stats().derived_computations, 3);
  EXPECT_EQ(fast.stats().eager_calls, 0);
}

// Longer inputs also read w * 3: their plan derives one value the shorter inputs' plan does not.
struct BranchingImpl : torch::nn::Module {
  BranchingImpl() { w = register_parameter("w", torch::randn({16, 8})); }
  torch::Tensor forward(const torch::Tensor& x) {
    auto y = torch::matmul(x, w * 2);
    return x.size(0) > 4 ? y + torch::matmul(x, w * 3) : y;
  }
  torch::Tensor w;
};
TORCH_MODULE(Branching);

TEST_F(DerivedValues, APlanTakesWhatItSharesAndComputesTheRest) {
  torch::NoGradGuard no_grad;
  Branching model;
  auto fast = compile(model, strict(true));
  auto check_both = [&](const std::string& what) {
    for (int round = 0; round < 3; ++round) {
      for (std::int64_t rows : {4, 6}) {
        auto x = torch::randn({rows, 16});
        EXPECT_LT(relative_error(fast(x), model->forward(x)), kTolerance) << what << ", " << rows << " rows";
      }
    }
  };
  check_both("before");
  EXPECT_EQ(fast.stats().derived_computations, 2) << "w * 2 once, then w * 3 for the longer inputs' plan";
  model->w.mul_(-1);
  check_both("after an update in place");
  EXPECT_EQ(fast.stats().derived_computations, 4);
  EXPECT_EQ(fast.stats().eager_calls, 0);
}

// Returns a view of what it derives from its parameter: eager hands out new memory at every call.
struct ExposedImpl : torch::nn::Module {
  ExposedImpl() { w = register_parameter("w", torch::randn({4, 8})); }
  std::tuple<torch::Tensor, torch::Tensor> forward(const torch::Tensor& x) {
    auto scaled = w * 2;
    return {torch::matmul(x, scaled.t()), scaled.view({-1})};
  }
  torch::Tensor w;
};
TORCH_MODULE(Exposed);

TEST_F(DerivedValues, WhatACallerGetsIsNeverKeptMemory) {
  torch::NoGradGuard no_grad;
  Exposed model;
  auto fast = compile(model, strict(true));
  std::vector<std::pair<torch::Tensor, torch::Tensor>> held;  // (what the call gave, eager's)
  for (int call = 0; call < 4; ++call) {
    auto x = torch::randn({3, 8});
    auto [product, scaled] = fast(x);
    auto [want_product, want_scaled] = model->forward(x);
    EXPECT_LT(relative_error(product, want_product), kTolerance) << "call " << call;
    EXPECT_TRUE(torch::equal(scaled, want_scaled)) << "call " << call;
    held.emplace_back(scaled, want_scaled.clone());
    model->w.mul_(-1.5);  // between calls, as a training loop would
  }
  for (std::size_t call = 0; call < held.size(); ++call) {
    EXPECT_TRUE(torch::equal(held[call].first, held[call].second)) << "the result of call " << call << " changed later";
  }
  held.back().first.fill_(7);  // the caller's to write
  auto x = torch::randn({3, 8});
  EXPECT_LT(relative_error(std::get<0>(fast(x)), std::get<0>(model->forward(x))), kTolerance) << "after the write";
}

// Negates its second argument in place, then multiplies by what it derives from its parameter. A
// call that passes the parameter itself as that argument changes the parameter in the middle of
// the call: the kept value, computed before the call began, is stale for the product after it.
struct NegatesItsArgumentImpl : torch::nn::Module {
  NegatesItsArgumentImpl() { w = register_parameter("w", torch::randn({8, 4})); }
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& y) {
    y.mul_(-1);
    return torch::matmul(x, w * 2) + y.sum();
  }
  torch::Tensor w;
};
TORCH_MODULE(NegatesItsArgument);

TEST_F(DerivedValues, AParameterTheCallPassesAndTheForwardWritesIsReadAfterTheWrite) {
  torch::NoGradGuard no_grad;
  NegatesItsArgument model;
  auto fast = compile(model, strict(true));
  auto weight = model->w.detach();  // the parameter's memory, as an argument
  for (int call = 0; call < 4; ++call) {
    const std::string what = "call " + std::to_string(call);
    auto x = torch::randn({3, 8});
    const bool aliased = call >= 2;  // calls 0 and 1 pass a tensor of their own
    auto fresh = torch::randn({8, 4});
    weight.copy_(fresh);
    auto y = aliased ? weight : torch::randn({8, 4});
    auto y_eager = aliased ? weight : y.clone();
    auto got = fast(x, y);
    auto weight_after = weight.clone();
    weight.copy_(fresh);
    auto want = model->forward(x, y_eager);
    EXPECT_LT(relative_error(got, want), kTolerance) << what;
    EXPECT_TRUE(torch::equal(weight_after, model->w)) << what;
  }
}

TEST_F(DerivedValues, AFunctionWithoutParametersHasNone) {
  torch::NoGradGuard no_grad;
  auto fn = [](torch::Tensor x, torch::Tensor w) { return torch::matmul(x, w * 2); };
  auto fast = compile(fn, strict(true));
  for (int call = 0; call < 3; ++call) {
    auto x = torch::randn({4, 16}), w = torch::randn({16, 8});
    EXPECT_LT(relative_error(fast(x, w), fn(x, w)), kTolerance) << "call " << call;
  }
  EXPECT_EQ(fast.stats().derived_computations, 0) << "w is an argument: computed at every call";
}

}  // namespace
}  // namespace zenith
