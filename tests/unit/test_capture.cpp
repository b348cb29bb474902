// Capture and the compiled module: parameters bound live, signatures, the plan cache, output
// structures, non-tensor arguments, TorchScript modules and callables, eager paths. Every
// comparison with eager calls its signature on fresh inputs after the capture (a plan computes,
// never remembers), and every test seeds the generator it draws from.
//
// Tolerances: the CPU plugin runs the same ATen kernels as eager through the dispatcher, in the
// same order, so results agree to the rounding of a kernel that picks another summation order for
// another alignment of its operands (the matrix products): allclose's rtol 1e-5 with atol 1e-6
// for values of order one. Elementwise-only results (relu, mul, exp, x * 2) are exact. A stale
// or wrong value is off by order one.
#include <gtest/gtest.h>

#include <filesystem>

#include <torch/script.h>
#include <torch/torch.h>

#include "common/fresh_inputs.h"
#include "capture/torchscript_forward.h"
#include "zenith/compile.h"

namespace zenith {
namespace {

using testing::call_name;
using testing::fresh_like;
using testing::kCallsPerSignature;

CompileOptions strict() {
  CompileOptions options;
  options.fallback_to_eager = false;  // a capture problem must fail the test, not hide in eager
  return options;
}

struct TwoHeadsImpl : torch::nn::Module {
  torch::nn::Linear body{nullptr}, head{nullptr};
  TwoHeadsImpl() {
    body = register_module("body", torch::nn::Linear(6, 8));
    head = register_module("head", torch::nn::Linear(8, 3));
  }
  std::tuple<torch::Tensor, torch::Tensor> forward(torch::Tensor x) {
    auto h = torch::gelu(body(x));
    return {head(h), h.sum(-1)};
  }
};
TORCH_MODULE(TwoHeads);

struct ScaleImpl : torch::nn::Module {
  torch::Tensor weight;
  ScaleImpl() { weight = register_parameter("weight", torch::randn({4})); }
  torch::Tensor forward(torch::Tensor x, int64_t power) { return x * weight.pow(static_cast<double>(power)); }
};
TORCH_MODULE(Scale);

struct SplitImpl : torch::nn::Module {
  std::vector<torch::Tensor> forward(torch::Tensor x) { return (x * 2).chunk(3, 0); }
};
TORCH_MODULE(Split);

TEST(Capture, TupleOutputsMatchEager) {
  torch::manual_seed(1);
  torch::NoGradGuard no_grad;
  TwoHeads model;
  auto fast = compile(model, strict());
  for (int call = 0; call < kCallsPerSignature; ++call) {
    auto x = torch::randn({5, 6});
    auto [a, b] = fast(x);
    auto [ea, eb] = model->forward(x);
    EXPECT_TRUE(torch::allclose(a, ea, 1e-5, 1e-6)) << call_name(call);
    EXPECT_TRUE(torch::allclose(b, eb, 1e-5, 1e-6)) << call_name(call);
  }
  auto stats = fast.stats();
  EXPECT_EQ(stats.misses, 1);
  EXPECT_EQ(stats.hits, kCallsPerSignature - 1);
  EXPECT_GT(fast.report().nodes_captured, 3);
}

TEST(Capture, ParametersAreReadLiveAfterAnOptimizerStep) {
  torch::manual_seed(2);
  TwoHeads model;
  auto fast = compile(model, strict());
  auto x = torch::randn({4, 6});
  torch::Tensor before;
  {
    torch::NoGradGuard no_grad;
    for (int call = 0; call < kCallsPerSignature; ++call) {
      auto input = call == 0 ? x : torch::randn({4, 6});
      EXPECT_TRUE(torch::allclose(std::get<0>(fast(input)), std::get<0>(model->forward(input)), 1e-5, 1e-6))
          << call_name(call);
    }
    before = std::get<0>(fast(x));
  }
  // One SGD step in eager mode changes every parameter in place.
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.5));
  auto loss = std::get<0>(model->forward(x)).pow(2).sum();
  optimizer.zero_grad();
  loss.backward();
  optimizer.step();
  torch::NoGradGuard no_grad;
  auto after = std::get<0>(fast(x));
  EXPECT_FALSE(torch::allclose(before, after));
  EXPECT_TRUE(torch::allclose(after, std::get<0>(model->forward(x)), 1e-5, 1e-6));
  auto fresh = torch::randn({4, 6});
  EXPECT_TRUE(torch::allclose(std::get<0>(fast(fresh)), std::get<0>(model->forward(fresh)), 1e-5, 1e-6))
      << "after the step, on fresh values";
  EXPECT_EQ(fast.stats().misses, 1) << "an in-place parameter update must not recapture";
}

TEST(Capture, NewShapesRecaptureAndTheCacheIsBounded) {
  torch::manual_seed(3);
  torch::NoGradGuard no_grad;
  auto options = strict();
  options.plan_cache_size = 2;
  options.dynamic_shapes = DynamicShapes::Off;  // every new size is its own signature
  TwoHeads model;
  auto fast = compile(model, options);
  for (int rows : {1, 2, 3, 1}) {
    for (int call = 0; call < kCallsPerSignature; ++call) {
      auto x = torch::randn({rows, 6});
      EXPECT_TRUE(torch::allclose(std::get<0>(fast(x)), std::get<0>(model->forward(x)), 1e-5, 1e-6))
          << rows << " rows, " << call_name(call);
    }
  }
  constexpr int kReplays = kCallsPerSignature - 1;  // hits per signature
  auto stats = fast.stats();
  EXPECT_EQ(stats.misses, 4);  // rows=1 was evicted by rows=3
  EXPECT_EQ(stats.hits, 4 * kReplays);
  EXPECT_EQ(stats.recaptures, 3) << "one recapture per new signature after the first";
  EXPECT_EQ(stats.evictions, 2);
  EXPECT_EQ(stats.size, 2u);
  EXPECT_EQ(stats.capacity, 2u);
  // The report of the last capture holds the counters as they were then, this capture counted:
  // the replays of the three signatures before it.
  auto report = fast.report();
  EXPECT_EQ(report.plan_cache.misses, 4);
  EXPECT_EQ(report.plan_cache.recaptures, 3);
  const auto counters = "plan cache: " + std::to_string(3 * kReplays) + " hits, 4 misses (3 recaptures)";
  EXPECT_NE(report.to_string().find(counters), std::string::npos) << report.to_string();
  auto x = torch::randn({1, 6});
  EXPECT_TRUE(torch::allclose(std::get<0>(fast(x)), std::get<0>(model->forward(x)), 1e-5, 1e-6));
  EXPECT_EQ(fast.stats().hits, 4 * kReplays + 1);
  EXPECT_EQ(fast.stats().recaptures, 3);
}

TEST(Capture, ASignatureEvictedRightAfterItsHitsIsCapturedAgain) {
  // A call that repeats the last hit's signature skips the cache's lookup; a capture in between
  // must end that, or a call would run the plan the cache evicted and no count would say so.
  torch::manual_seed(15);
  torch::NoGradGuard no_grad;
  auto options = strict();
  options.plan_cache_size = 1;
  options.dynamic_shapes = DynamicShapes::Off;
  TwoHeads model;
  auto fast = compile(model, options);
  // Each signature on two inputs at least; 1 row follows 2 rows' capture at once.
  for (int rows : {1, 1, 1, 2, 1, 1, 2}) {
    auto x = torch::randn({rows, 6});
    // Products of six and eight terms: rounding of order 1e-7.
    EXPECT_TRUE(torch::allclose(std::get<0>(fast(x)), std::get<0>(model->forward(x)), 1e-5, 1e-6)) << rows << " rows";
  }
  const auto stats = fast.stats();
  EXPECT_EQ(stats.misses, 4) << "1 row, 2 rows (evicting 1 row), 1 row again, 2 rows again";
  EXPECT_EQ(stats.hits, 3);
  EXPECT_EQ(stats.evictions, 3);
}

TEST(Capture, StridesAndEvalModeAreInTheSignature) {
  torch::manual_seed(4);
  torch::NoGradGuard no_grad;
  TwoHeads model;
  auto fast = compile(model, strict());
  // Each signature on fresh values of its layout: the capture, then replays.
  auto expect_computed = [&](const at::Tensor& like, const std::string& what) {
    for (int call = 0; call < kCallsPerSignature; ++call) {
      auto x = call == 0 ? like : fresh_like(like);
      EXPECT_TRUE(torch::allclose(std::get<0>(fast(x)), std::get<0>(model->forward(x)), 1e-5, 1e-6))
          << what << ", " << call_name(call);
    }
  };
  auto x = torch::randn({6, 4}).t();  // non-contiguous
  expect_computed(x, "transposed");
  expect_computed(x.contiguous(), "contiguous");
  model->eval();
  expect_computed(x.contiguous(), "contiguous, eval");
  EXPECT_EQ(fast.stats().misses, 3);
}

TEST(Capture, AUnitDimensionsStrideIsNotInTheSignature) {
  // A generation loop's next token sliced from a longer tensor: [1, 1, 4] out of [1, n, 4], so its
  // first stride (4n) changes with n though no element moves. One signature for all of them and
  // for a [1, 1, 4] tensor of its own, each call computed on its own values; a stride that places
  // elements (every other element of a row) is another signature.
  torch::manual_seed(5);
  torch::NoGradGuard no_grad;
  auto fn = [](torch::Tensor x) { return (x * 2).sin() + x.exp(); };
  auto fast = compile(fn, strict());
  auto expect_computed = [&](const at::Tensor& x, const std::string& what) {
    // Tolerances: float32 roundoff through sin and exp, compiled against eager.
    EXPECT_TRUE(torch::allclose(fast(x), fn(x), 1e-5, 1e-6)) << what;
  };
  for (std::int64_t n : {5, 9, 17, 33, 2}) {
    auto longer = torch::randn({1, n, 4});
    auto token = longer.narrow(1, n / 2, 1);
    ASSERT_EQ(token.stride(0), 4 * n);
    expect_computed(token, "a column of [1, " + std::to_string(n) + ", 4]");
  }
  expect_computed(torch::randn({1, 1, 4}), "a [1, 1, 4] tensor of its own");
  EXPECT_EQ(fast.stats().misses, 1);
  for (int call = 0; call < 2; ++call) {
    expect_computed(torch::randn({1, 1, 8}).slice(2, 0, 8, 2), "every other element, " + call_name(call));
  }
  EXPECT_EQ(fast.stats().misses, 2);
  EXPECT_EQ(fast.stats().eager_calls, 0);
}

TEST(Capture, NonTensorArgumentsArePartOfTheSignature) {
  torch::manual_seed(5);
  torch::NoGradGuard no_grad;
  Scale model;
  auto fast = compile(model, strict());
  // Powers 2, 3, 2, 3: each power's capture, then its replay on a fresh x.
  for (int call = 0; call < 4; ++call) {
    const int power = 2 + call % 2;
    auto x = torch::randn({4});
    EXPECT_TRUE(torch::allclose(fast(x, power), model->forward(x, power))) << "power " << power << ", call " << call;
  }
  EXPECT_EQ(fast.stats().misses, 2);
  EXPECT_EQ(fast.stats().hits, 2);
}

TEST(Capture, VectorOutputs) {
  torch::manual_seed(6);
  torch::NoGradGuard no_grad;
  Split model;
  auto fast = compile(model, strict());
  for (int call = 0; call < kCallsPerSignature; ++call) {
    auto x = torch::randn({6, 2});
    auto parts = fast(x);
    auto want = model->forward(x);
    ASSERT_EQ(parts.size(), 3u) << call_name(call);
    for (std::size_t i = 0; i < parts.size(); ++i) {
      EXPECT_TRUE(torch::equal(parts[i], want[i])) << "part " << i << ", " << call_name(call);  // x * 2: exact
    }
  }
}

TEST(Capture, Callables) {
  torch::manual_seed(7);
  torch::NoGradGuard no_grad;
  auto weight = torch::randn({3, 3});
  auto fast = compile([weight](at::Tensor a, at::Tensor b) { return torch::tanh(a.matmul(weight) + b); }, strict());
  at::Tensor (*plain)(at::Tensor) = [](at::Tensor t) { return t.exp(); };
  auto fast_plain = compile(plain, strict());
  for (int call = 0; call < kCallsPerSignature; ++call) {
    auto a = torch::randn({2, 3}), b = torch::randn({2, 3});
    // A three-term product and tanh (slope at most 1): rounding of order 1e-7.
    EXPECT_TRUE(torch::allclose(fast(a, b), torch::tanh(a.matmul(weight) + b), 1e-6, 1e-6)) << call_name(call);
    EXPECT_TRUE(torch::allclose(fast_plain(a), a.exp())) << call_name(call);
  }
}

TEST(Capture, TorchScriptModuleFromAFile) {
  torch::manual_seed(8);
  torch::jit::Module scripted("Tiny");
  scripted.register_parameter("w", torch::randn({4, 4}), false);
  scripted.register_buffer("shift", torch::randn({4}));
  scripted.define(R"(
    def forward(self, x, y):
        return torch.relu(torch.matmul(x, self.w) + self.shift) * y
  )");
  auto path = (std::filesystem::temp_directory_path() / "zenith_tiny_module.pt").string();
  scripted.save(path);
  auto loaded = torch::jit::load(path);
  loaded.eval();
  torch::NoGradGuard no_grad;
  auto fast = compile(loaded, strict());
  for (int call = 0; call < kCallsPerSignature; ++call) {
    auto x = torch::randn({3, 4}), y = torch::randn({3, 4});
    auto got = fast({x, y}).toTensor();
    EXPECT_TRUE(torch::allclose(got, loaded.forward({x, y}).toTensor(), 1e-5, 1e-6)) << call_name(call);
  }
  EXPECT_GE(fast.report().nodes_captured, 3);
  EXPECT_THROW(fast({torch::randn({3, 4})}), Error);
}

struct ShiftedLinearImpl : torch::nn::Module {
  ShiftedLinearImpl() : linear(register_module("linear", torch::nn::Linear(6, 6))), shift(register_buffer("shift", torch::randn({6}))) {}
  torch::Tensor forward(torch::Tensor x) { return torch::relu(linear(x) + shift); }
  torch::nn::Linear linear;
  torch::Tensor shift;
};
TORCH_MODULE(ShiftedLinear);

TEST(Capture, ModuleParametersReplacedBetweenCallsAreSeen) {
  // A call walks the module tree to see that no parameter, buffer or submodule was replaced or
  // added, and reads them by name again only when one was: each change below is seen.
  torch::manual_seed(13);
  torch::NoGradGuard no_grad;
  ShiftedLinear model;
  auto fast = compile(model, strict());
  auto check = [&](const std::string& when) {
    for (int call = 0; call < kCallsPerSignature; ++call) {
      auto x = torch::randn({3, 6});
      // A six-term product: rounding of order 1e-7.
      EXPECT_TRUE(torch::allclose(fast(x), model->forward(x), 1e-5, 1e-6)) << when << ", " << call_name(call);
    }
  };
  check("as compiled");
  // The C++ frontend replaces a registered tensor only with its submodule, or in place.
  model->linear = model->replace_module("linear", torch::nn::Linear(6, 6));
  check("a submodule replaced");
  model->linear->weight.set_data(torch::randn({6, 6}));
  check("a parameter's data replaced in place");
  EXPECT_EQ(fast.stats().misses, 1) << "the same types: replaced tensors are the plan's inputs, not a new signature";
  model->register_buffer("unused", torch::zeros({2}));
  check("a buffer added");
  EXPECT_EQ(fast.stats().misses, 2) << "another state is another signature";
}

TEST(Capture, TorchScriptParametersReplacedBetweenCallsAreSeen) {
  // A call does not read a TorchScript module's parameters by name again while they stay where
  // they were; one replaced (setattr), in the module or a submodule, or resized in place, is seen.
  torch::manual_seed(12);
  torch::jit::Module inner("Inner");
  inner.register_parameter("w", torch::randn({4, 4}), false);
  inner.define(R"(
    def forward(self, x):
        return torch.matmul(x, self.w)
  )");
  torch::jit::Module outer("Outer");
  outer.register_module("inner", inner);
  outer.register_buffer("shift", torch::randn({4}));
  outer.define(R"(
    def forward(self, x):
        return torch.relu(self.inner.forward(x) + self.shift)
  )");
  outer.eval();
  torch::NoGradGuard no_grad;
  auto fast = compile(outer, strict());
  auto check = [&](const std::string& when) {
    for (int call = 0; call < kCallsPerSignature; ++call) {
      auto x = torch::randn({3, 4});
      // A four-term product: rounding of order 1e-7.
      EXPECT_TRUE(torch::allclose(fast({x}).toTensor(), outer.forward({x}).toTensor(), 1e-5, 1e-6))
          << when << ", " << call_name(call);
    }
  };
  check("as compiled");
  outer.setattr("shift", torch::randn({4}));
  check("a buffer replaced");
  inner.setattr("w", torch::randn({4, 4}));
  check("a submodule's parameter replaced");
  auto other = inner.deepcopy();
  other.setattr("w", torch::randn({4, 4}));
  outer.register_module("inner", other);
  check("a submodule replaced");
  outer.attr("shift").toTensor().set_data(torch::randn({1}));
  check("a buffer resized in place");
  EXPECT_EQ(fast.stats().eager_calls, 0);
}

TEST(Capture, TorchScriptTrainingFlagIsReadAtEveryCall) {
  // The module's training flag is part of a call's signature: train() after compiling is a new
  // signature, and eval() again is the first one's.
  torch::manual_seed(13);
  torch::jit::Module scripted("Flag");
  // A module scripted or traced in Python has the attribute; one built in C++ has it only when
  // registered (without it, train() and eval() change nothing and is_training() says true).
  scripted.register_attribute("training", c10::BoolType::get(), true);
  scripted.register_parameter("w", torch::randn({4, 4}), false);
  scripted.define(R"(
    def forward(self, x):
        return torch.relu(torch.matmul(x, self.w))
  )");
  scripted.eval();
  torch::NoGradGuard no_grad;
  auto fast = compile(scripted, strict());
  auto call = [&](const std::string& when) {
    auto x = torch::randn({3, 4});
    // One product of four terms: rounding of order 1e-7.
    EXPECT_TRUE(torch::allclose(fast({x}).toTensor(), scripted.forward({x}).toTensor(), 1e-5, 1e-6)) << when;
  };
  call("eval");
  call("eval again");
  EXPECT_EQ(fast.stats().misses, 1);
  scripted.train();
  call("train");
  call("train again");
  EXPECT_EQ(fast.stats().misses, 2) << "train() was not seen";
  scripted.eval();
  call("eval after train");
  EXPECT_EQ(fast.stats().misses, 2) << "eval() again is the first signature";
  EXPECT_EQ(fast.stats().eager_calls, 0);
}

TEST(Capture, AForwardWithoutControlFlowIsStraightLine) {
  // Symbolic plans may fit values read from sizes only where they cannot choose the ops that run.
  torch::jit::Module inner("Branchy");
  inner.define(R"(
    def forward(self, x):
        if x.size(0) > 2:
            return x * 2
        return x
  )");
  torch::jit::Module outer("Plain");
  outer.register_module("inner", inner);
  outer.define(R"(
    def forward(self, x):
        return torch.relu(x) + 1
  )");
  EXPECT_TRUE(capture::straight_line(outer));
  EXPECT_FALSE(capture::straight_line(inner));
  torch::jit::Module calling("Calling");
  calling.register_module("inner", inner);
  calling.define(R"(
    def forward(self, x):
        return self.inner.forward(x) + 1
  )");
  EXPECT_FALSE(capture::straight_line(calling)) << "a submodule's branch counts once inlined";
}

TEST(Capture, GradientsGoThroughACompiledBackward) {
  torch::manual_seed(9);
  TwoHeads model;
  auto fast = compile(model, strict());
  // The capture runs eager autograd; later calls are one autograd node with a compiled backward.
  for (int call = 0; call < kCallsPerSignature; ++call) {
    auto x = torch::randn({3, 6});
    model->zero_grad();
    std::get<0>(fast(x)).sum().backward();
    ASSERT_TRUE(model->body->weight.grad().defined()) << call_name(call);
    auto compiled_grad = model->body->weight.grad().clone();
    model->zero_grad();
    std::get<0>(model->forward(x)).sum().backward();
    EXPECT_TRUE(torch::allclose(compiled_grad, model->body->weight.grad())) << call_name(call);
  }
  EXPECT_EQ(fast.stats().eager_calls, 0);
  EXPECT_EQ(fast.stats().misses, 1);
  EXPECT_EQ(fast.stats().training_calls, kCallsPerSignature - 1);
}

TEST(Capture, ParametersFrozenWithoutGradModeAreSeenInGradMode) {
  // Outside grad mode a call does not compare the parameters' requires_grad (every call is an
  // inference call); one frozen there must still be seen by the next call in grad mode, or that
  // call would run the training plan of the parameters as they were.
  torch::manual_seed(14);
  TwoHeads model;
  auto fast = compile(model, strict());
  auto x = torch::randn({3, 6});
  for (int call = 0; call < kCallsPerSignature; ++call) {
    EXPECT_TRUE(std::get<0>(fast(fresh_like(x))).requires_grad()) << "training, " << call_name(call);
  }
  {
    torch::NoGradGuard no_grad;
    EXPECT_FALSE(std::get<0>(fast(fresh_like(x))).requires_grad());
    for (auto& parameter : model->parameters()) parameter.requires_grad_(false);
    EXPECT_FALSE(std::get<0>(fast(fresh_like(x))).requires_grad());
  }
  for (int call = 0; call < kCallsPerSignature; ++call) {
    auto input = fresh_like(x);
    auto compiled = fast(input);
    auto eager = model->forward(input);
    EXPECT_FALSE(std::get<0>(compiled).requires_grad()) << "every parameter frozen, " << call_name(call);
    // Products of six and eight terms: rounding of order 1e-7.
    EXPECT_TRUE(torch::allclose(std::get<0>(compiled), std::get<0>(eager), 1e-5, 1e-6)) << call_name(call);
    EXPECT_TRUE(torch::allclose(std::get<1>(compiled), std::get<1>(eager), 1e-5, 1e-6)) << call_name(call);
  }
  EXPECT_EQ(fast.stats().training_calls, kCallsPerSignature - 1) << "the training plan served only the first calls";
  EXPECT_EQ(fast.stats().eager_calls, 0);
}

TEST(Capture, DisableRunsEager) {
  torch::manual_seed(10);
  torch::NoGradGuard no_grad;
  auto options = strict();
  options.disable = true;
  TwoHeads model;
  auto fast = compile(model, options);
  fast(torch::randn({2, 6}));
  EXPECT_EQ(fast.stats().eager_calls, 1);
  EXPECT_EQ(fast.stats().misses, 0);
}

TEST(Capture, EnvironmentDisablesAndDumps) {
  torch::manual_seed(11);
  torch::NoGradGuard no_grad;
  auto folder = std::filesystem::temp_directory_path() / ("zenith-env-dump-" + std::to_string(::getpid()));
  setenv("ZENITH_DISABLE", "1", 1);
  auto disabled = compile([](at::Tensor x) { return x * 2; });
  unsetenv("ZENITH_DISABLE");
  setenv("ZENITH_DUMP_DIR", folder.c_str(), 1);
  auto dumping = compile([](at::Tensor x) { return x * 2; });
  unsetenv("ZENITH_DUMP_DIR");
  auto x = torch::randn({3});
  EXPECT_TRUE(torch::equal(disabled(x), x * 2));
  EXPECT_EQ(disabled.stats().eager_calls, 1);
  dumping(x);
  auto path = dumping.report().dump_path;
  EXPECT_EQ(std::filesystem::path(path).parent_path(), folder);
  EXPECT_TRUE(std::filesystem::exists(path));
  std::filesystem::remove(path);
  std::filesystem::remove(folder);
}

TEST(Capture, InferenceModeCompiles) {
  torch::manual_seed(12);
  c10::InferenceMode inference;
  TwoHeads model;
  auto fast = compile(model, strict());
  for (int call = 0; call < kCallsPerSignature; ++call) {
    auto x = torch::randn({2, 6});
    EXPECT_TRUE(torch::allclose(std::get<0>(fast(x)), std::get<0>(model->forward(x)), 1e-5, 1e-6)) << call_name(call);
  }
  EXPECT_EQ(fast.stats().hits, kCallsPerSignature - 1);
}

}  // namespace
}  // namespace zenith
