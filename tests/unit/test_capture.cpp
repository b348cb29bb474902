// Capture and the compiled module: parameters bound live, signatures, the plan cache, output
// structures, non-tensor arguments, TorchScript modules and callables, eager paths.
#include <gtest/gtest.h>

#include <filesystem>

#include <torch/script.h>
#include <torch/torch.h>

#include "zenith/compile.h"

namespace zenith {
namespace {

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
  torch::NoGradGuard no_grad;
  TwoHeads model;
  auto fast = compile(model, strict());
  auto x = torch::randn({5, 6});
  for (int call = 0; call < 2; ++call) {
    auto [a, b] = fast(x);
    auto [ea, eb] = model->forward(x);
    EXPECT_TRUE(torch::allclose(a, ea, 1e-5, 1e-6));
    EXPECT_TRUE(torch::allclose(b, eb, 1e-5, 1e-6));
  }
  auto stats = fast.stats();
  EXPECT_EQ(stats.misses, 1);
  EXPECT_EQ(stats.hits, 1);
  EXPECT_GT(fast.report().nodes_captured, 3);
}

TEST(Capture, ParametersAreReadLiveAfterAnOptimizerStep) {
  TwoHeads model;
  auto fast = compile(model, strict());
  auto x = torch::randn({4, 6});
  torch::Tensor before;
  {
    torch::NoGradGuard no_grad;
    fast(x);
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
  EXPECT_EQ(fast.stats().misses, 1) << "an in-place parameter update must not recapture";
}

TEST(Capture, NewShapesRecaptureAndTheCacheIsBounded) {
  torch::NoGradGuard no_grad;
  auto options = strict();
  options.plan_cache_size = 2;
  options.dynamic_shapes = DynamicShapes::Off;  // every new size is its own signature
  TwoHeads model;
  auto fast = compile(model, options);
  for (int rows : {1, 2, 3, 1}) {
    auto x = torch::randn({rows, 6});
    EXPECT_TRUE(torch::allclose(std::get<0>(fast(x)), std::get<0>(model->forward(x)), 1e-5, 1e-6));
  }
  auto stats = fast.stats();
  EXPECT_EQ(stats.misses, 4);  // rows=1 was evicted by rows=3
  EXPECT_EQ(stats.recaptures, 3) << "one recapture per new signature after the first";
  EXPECT_EQ(stats.evictions, 2);
  EXPECT_EQ(stats.size, 2u);
  EXPECT_EQ(stats.capacity, 2u);
  // The report of the last capture holds the counters as they were then, this capture counted.
  auto report = fast.report();
  EXPECT_EQ(report.plan_cache.misses, 4);
  EXPECT_EQ(report.plan_cache.recaptures, 3);
  EXPECT_NE(report.to_string().find("plan cache: 0 hits, 4 misses (3 recaptures)"), std::string::npos)
      << report.to_string();
  fast(torch::randn({1, 6}));
  EXPECT_EQ(fast.stats().hits, 1);
  EXPECT_EQ(fast.stats().recaptures, 3);
}

TEST(Capture, StridesAndEvalModeAreInTheSignature) {
  torch::NoGradGuard no_grad;
  TwoHeads model;
  auto fast = compile(model, strict());
  auto x = torch::randn({6, 4}).t();  // non-contiguous
  EXPECT_TRUE(torch::allclose(std::get<0>(fast(x)), std::get<0>(model->forward(x)), 1e-5, 1e-6));
  fast(x.contiguous());
  model->eval();
  fast(x.contiguous());
  EXPECT_EQ(fast.stats().misses, 3);
}

TEST(Capture, NonTensorArgumentsArePartOfTheSignature) {
  torch::NoGradGuard no_grad;
  Scale model;
  auto fast = compile(model, strict());
  auto x = torch::randn({4});
  EXPECT_TRUE(torch::allclose(fast(x, 2), model->forward(x, 2)));
  EXPECT_TRUE(torch::allclose(fast(x, 3), model->forward(x, 3)));
  EXPECT_TRUE(torch::allclose(fast(x, 2), model->forward(x, 2)));
  EXPECT_EQ(fast.stats().misses, 2);
  EXPECT_EQ(fast.stats().hits, 1);
}

TEST(Capture, VectorOutputs) {
  torch::NoGradGuard no_grad;
  Split model;
  auto fast = compile(model, strict());
  auto x = torch::randn({6, 2});
  fast(x);
  auto parts = fast(x);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_TRUE(torch::equal(parts[2], x.slice(0, 4) * 2));
}

TEST(Capture, Callables) {
  torch::NoGradGuard no_grad;
  auto weight = torch::randn({3, 3});
  auto fast = compile([weight](at::Tensor a, at::Tensor b) { return torch::tanh(a.matmul(weight) + b); }, strict());
  auto a = torch::randn({2, 3}), b = torch::randn({2, 3});
  fast(a, b);
  EXPECT_TRUE(torch::allclose(fast(a, b), torch::tanh(a.matmul(weight) + b), 1e-6, 1e-6));
  at::Tensor (*plain)(at::Tensor) = [](at::Tensor t) { return t.exp(); };
  auto fast_plain = compile(plain, strict());
  EXPECT_TRUE(torch::allclose(fast_plain(a), a.exp()));
}

TEST(Capture, TorchScriptModuleFromAFile) {
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
  auto x = torch::randn({3, 4}), y = torch::randn({3, 4});
  fast({x, y});
  auto got = fast({x, y}).toTensor();
  EXPECT_TRUE(torch::allclose(got, loaded.forward({x, y}).toTensor(), 1e-5, 1e-6));
  EXPECT_GE(fast.report().nodes_captured, 3);
  EXPECT_THROW(fast({x}), Error);
}

TEST(Capture, GradientsGoThroughACompiledBackward) {
  TwoHeads model;
  auto fast = compile(model, strict());
  auto x = torch::randn({3, 6});
  std::get<0>(fast(x)).sum().backward();  // the capture: eager autograd
  model->zero_grad();
  std::get<0>(fast(x)).sum().backward();  // one autograd node, compiled backward
  ASSERT_TRUE(model->body->weight.grad().defined());
  auto compiled_grad = model->body->weight.grad().clone();
  model->zero_grad();
  std::get<0>(model->forward(x)).sum().backward();
  EXPECT_TRUE(torch::allclose(compiled_grad, model->body->weight.grad()));
  EXPECT_EQ(fast.stats().eager_calls, 0);
  EXPECT_EQ(fast.stats().misses, 1);
  EXPECT_EQ(fast.stats().training_calls, 1);
}

TEST(Capture, DisableRunsEager) {
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
  c10::InferenceMode inference;
  TwoHeads model;
  auto fast = compile(model, strict());
  auto x = torch::randn({2, 6});
  fast(x);
  EXPECT_TRUE(torch::allclose(std::get<0>(fast(x)), std::get<0>(model->forward(x)), 1e-5, 1e-6));
  EXPECT_EQ(fast.stats().hits, 1);
}

}  // namespace
}  // namespace zenith
