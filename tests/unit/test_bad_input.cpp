// Bad input: a clear zenith::Error that says what was expected and what came, and a compiled
// module that stays usable afterwards: it still computes, on the call that worked and on fresh
// values of its signature. Every test that draws random numbers seeds the generator first.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include <torch/script.h>
#include <torch/torch.h>

#include "common/error_message.h"
#include "zenith/compile.h"

namespace zenith {
namespace {

using testing::error_message_of;

TEST(BadInput, WrongDtypeNamesExpectedAndGotAndTheModuleStaysUsable) {
  torch::manual_seed(1);
  torch::NoGradGuard no_grad;
  torch::nn::Linear model(4, 2);
  auto fast = compile(model);
  auto good = torch::randn({3, 4});
  fast(good);
  auto message = error_message_of([&] { fast(torch::randint(0, 5, {3, 4}, torch::kLong)); });
  EXPECT_NE(message.find("forward raised while Zenith captured it"), std::string::npos) << message;
  EXPECT_NE(message.find("dtype float32 -> int64"), std::string::npos) << message;
  EXPECT_NE(message.find("expected a call like the last one that worked"), std::string::npos) << message;
  // A linear layer on the CPU plugin: ATen's own kernels, rounding of order 1e-7.
  EXPECT_TRUE(torch::allclose(fast(good), model->forward(good), 1e-5, 1e-6));
  auto fresh = torch::randn({3, 4});
  EXPECT_TRUE(torch::allclose(fast(fresh), model->forward(fresh), 1e-5, 1e-6)) << "fresh values";
}

TEST(BadInput, WrongRankNamesTheSizes) {
  torch::manual_seed(2);
  torch::NoGradGuard no_grad;
  torch::nn::Linear model(4, 2);
  auto fast = compile(model);
  fast(torch::randn({3, 4}));
  auto message = error_message_of([&] { fast(torch::randn({3, 5})); });
  EXPECT_NE(message.find("sizes [3, 4] -> [3, 5]"), std::string::npos) << message;
  EXPECT_EQ(fast.stats().misses, 2);
  auto x = torch::randn({3, 4});
  EXPECT_TRUE(torch::allclose(fast(x), model->forward(x), 1e-5, 1e-6)) << "fresh values";
  EXPECT_EQ(fast.stats().hits, 1);
}

TEST(BadInput, ADeviceNoBackendRunsFallsBackNamingTheDevice) {
  torch::NoGradGuard no_grad;
  auto fast = compile([](at::Tensor x) { return x * 2 + 1; });
  auto meta = torch::empty({3, 4}, torch::kMeta);
  auto y = fast(meta);
  EXPECT_EQ(y.device().type(), c10::kMeta);
  EXPECT_EQ(y.sizes(), meta.sizes());
  auto report = fast.report();
  EXPECT_TRUE(report.eager_fallback);
  EXPECT_NE(report.fallback_reason.find("is on meta; the cpu plugin runs cpu tensors only"), std::string::npos)
      << report.fallback_reason;
}

TEST(BadInput, UndefinedTensorArgument) {
  torch::NoGradGuard no_grad;
  torch::nn::Linear model(4, 2);
  auto fast = compile(model);
  auto message = error_message_of([&] { fast(at::Tensor()); });
  EXPECT_NE(message.find("argument 0: expected a defined tensor, got an undefined tensor"), std::string::npos) << message;
}

TEST(BadInput, TorchScriptArityAndNonTensorArguments) {
  torch::manual_seed(3);
  torch::jit::Module scripted("Echo");
  scripted.define(R"(
    def forward(self, x, tag: str):
        return x * 2
  )");
  torch::NoGradGuard no_grad;
  auto fast = compile(scripted);
  auto arity = error_message_of([&] { fast({torch::randn({2})}); });
  EXPECT_NE(arity.find("number of forward arguments: expected 2, got 1"), std::string::npos) << arity;
  auto kind = error_message_of([&] { fast({torch::randn({2}), c10::IValue(std::string("hello"))}); });
  EXPECT_NE(kind.find("argument 1: expected a tensor, bool, int or double, got String"), std::string::npos) << kind;
}

TEST(BadInput, BadOptionsAreRejectedAtCompile) {
  CompileOptions options;
  options.plan_cache_size = 0;
  auto message = error_message_of([&] { compile([](at::Tensor x) { return x + 1; }, options); });
  EXPECT_NE(message.find("plan_cache_size: expected at least 1, got 0"), std::string::npos) << message;
  CompileOptions negative;
  negative.verify_rtol = -1;
  EXPECT_THROW(compile([](at::Tensor x) { return x + 1; }, negative), Error);
  for (double fraction : {-0.5, std::nan("")}) {
    CompileOptions kept;
    kept.kept_weight_fraction = fraction;
    auto why = error_message_of([&] { compile([](at::Tensor x) { return x + 1; }, kept); });
    EXPECT_NE(why.find("kept_weight_fraction (or ZENITH_KEPT_WEIGHT_FRACTION): expected a number of 0 or more"),
              std::string::npos)
        << why;
  }
  // The environment's value replaces the option's; one that is not a number leaves the option.
  setenv("ZENITH_KEPT_WEIGHT_FRACTION", "-1", 1);
  auto from_environment = error_message_of([&] { compile([](at::Tensor x) { return x + 1; }); });
  setenv("ZENITH_KEPT_WEIGHT_FRACTION", "a tenth", 1);
  EXPECT_NO_THROW(compile([](at::Tensor x) { return x + 1; }));
  unsetenv("ZENITH_KEPT_WEIGHT_FRACTION");
  EXPECT_NE(from_environment.find("ZENITH_KEPT_WEIGHT_FRACTION): expected a number of 0 or more"), std::string::npos)
      << from_environment;
  EXPECT_NE(from_environment.find("got -1"), std::string::npos) << from_environment;
}

// Data-dependent: the length depends on the values, which a trace cannot see. Replaying a plan
// traced on positive data would give a wrong result on negative data of the same shape: the plan
// checks the value read (a value check) and such a call runs eagerly, or throws without fallback.
at::Tensor data_dependent(at::Tensor x) { return x.narrow(0, 0, x.sum().item<int64_t>() > 0 ? 1 : 2); }

TEST(BadInput, DataDependentForwardChecksTheValueInsteadOfBakingIt) {
  torch::NoGradGuard no_grad;
  auto fast = compile(&data_dependent);
  auto positive = torch::ones({3}), negative = -torch::ones({3});
  EXPECT_TRUE(torch::equal(fast(positive), data_dependent(positive)));
  EXPECT_TRUE(torch::equal(fast(negative), data_dependent(negative)));
  EXPECT_EQ(fast(negative).size(0), 2);
  EXPECT_EQ(fast.report().value_checks.size(), 1u) << fast.report().to_string();
  EXPECT_EQ(fast.stats().value_check_failures, 2);
  CompileOptions strict;
  strict.fallback_to_eager = false;
  auto refusing = compile(&data_dependent, strict);
  EXPECT_TRUE(torch::equal(refusing(positive), data_dependent(positive)));
  try {
    refusing(negative);
    ADD_FAILURE() << "a failed value check without fallback must throw";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("aten::item"), std::string::npos) << error.what();
  }
  EXPECT_TRUE(torch::equal(refusing(positive), data_dependent(positive))) << "still usable";
}

TEST(BadInput, AGraphNoBackendAcceptsFallsBackToEagerOrThrows) {
  torch::NoGradGuard no_grad;
  auto x = torch::ones({3});
  CompileOptions nothing;
  nothing.backends = {"no-such-backend"};
  auto eager = compile([](at::Tensor t) { return t * 3; }, nothing);
  EXPECT_TRUE(torch::equal(eager(x), x * 3));
  auto other = torch::arange(3.0f) - 1;  // the same signature, other values
  EXPECT_TRUE(torch::equal(eager(other), other * 3));
  auto report = eager.report();
  EXPECT_TRUE(report.eager_fallback);
  EXPECT_NE(report.fallback_reason.find("no backend can run node"), std::string::npos) << report.fallback_reason;
  EXPECT_EQ(eager.stats().eager_calls, 2);
  nothing.fallback_to_eager = false;
  auto strict = compile([](at::Tensor t) { return t * 3; }, nothing);
  auto message = error_message_of([&] { strict(x); });
  EXPECT_NE(message.find("cannot compile the call"), std::string::npos) << message;
  EXPECT_NE(message.find("fallback_to_eager"), std::string::npos) << message;
}

TEST(BadInput, APluginWhoseLaunchFailsMidPlanGivesAnErrorAndNothingOfTheCall) {
  // launchfails takes the element-wise group with the relu, after the CPU plugin's cumsum, and
  // fails its launch after writing NaN over half its output: the caller gets an error naming it,
  // no result, and what it held before is untouched.
  torch::manual_seed(5);
  torch::NoGradGuard no_grad;
  CompileOptions options;
  options.plugin_paths = {ZENITH_LAUNCHFAILS_PLUGIN};
  options.backends = {"launchfails", "cpu"};
  options.log_level = LogLevel::Error;
  auto fn = [](at::Tensor x) { return torch::relu(x.cumsum(0) * 2 + 1) * 3; };
  auto fast = compile(fn, options);
  auto x = torch::randn({64});
  const auto x_before = x.clone();
  auto first = fast(x);  // the capture: the trace's own eager result
  const auto placed = fast.report().nodes_per_backend;
  ASSERT_EQ(placed.count("launchfails"), 1u) << fast.report().to_string();
  ASSERT_EQ(placed.count("cpu"), 1u) << "a step before the failing one: " << fast.report().to_string();
  const auto first_before = first.clone();
  at::Tensor second;
  auto message = error_message_of([&] { second = fast(x); });
  EXPECT_NE(message.find("launchfails"), std::string::npos) << message;
  EXPECT_NE(message.find("simulated launch failure"), std::string::npos) << message;
  EXPECT_FALSE(second.defined()) << "nothing of the failed call is returned";
  EXPECT_TRUE(torch::equal(first, first_before)) << "an earlier result is untouched";
  EXPECT_TRUE(torch::equal(x, x_before)) << "the argument is untouched";
  EXPECT_TRUE(torch::allclose(first, fn(x))) << "the first call's result is eager's";
  // The module stays usable: the same plan fails the same way, with an error, not a crash.
  EXPECT_NE(error_message_of([&] { fast(torch::randn({64})); }).find("simulated launch failure"), std::string::npos);
}

struct NoisyImpl : torch::nn::Module {
  torch::nn::Dropout dropout{nullptr};
  NoisyImpl() { dropout = register_module("dropout", torch::nn::Dropout(0.5)); }
  torch::Tensor forward(torch::Tensor x) { return dropout(x); }
};
TORCH_MODULE(Noisy);

TEST(BadInput, VerifyCatchesAResultThatDiffersFromEager) {
  torch::manual_seed(4);
  torch::NoGradGuard no_grad;
  Noisy model;
  model->train();  // dropout draws different masks for the compiled and the eager run
  CompileOptions options;
  options.verify_calls = 1;
  auto fast = compile(model, options);
  auto x = torch::ones({1000});
  fast(x);  // capture
  auto message = error_message_of([&] { fast(x); });
  EXPECT_NE(message.find("verify: output 0 differs from eager"), std::string::npos) << message;
  model->eval();
  EXPECT_TRUE(torch::equal(fast(x), x));  // verify budget spent; eval is deterministic
  auto fresh = torch::randn({1000});
  EXPECT_TRUE(torch::equal(fast(fresh), fresh)) << "fresh values";
}

}  // namespace
}  // namespace zenith
