// The JIT CUDA backend's max-pooling kernel (backends/cuda/pool_codegen.h) on the GPU, against
// eager: every dtype it serves, channels-last (on its 16-byte path and off it: channel counts that
// are no multiple of a vector, a start one element off) and NCHW, the windows models use
// (ResNet's 3x3 stride 2 with padding, 2x2, ceil mode, dilation), NaN and infinities in the
// windows. Labelled `gpu`.
//
// Tolerance: none. A max pool selects one of its window's values and both sides hold them exactly
// (the kernel compares in float32, which holds every float16 and bfloat16 value), so results are
// equal element for element; a window holding NaN is NaN on both sides.
#include <gtest/gtest.h>

#include <limits>

#include <fmt/format.h>
#include <torch/torch.h>

#include "common/fresh_inputs.h"
#include "common/no_fallback.h"
#include "common_relative_error.h"
#include "zenith/compile.h"

namespace zenith {
namespace {

using testing::call_name;
using testing::fresh_like;
using testing::kCallsPerSignature;
using testing::no_fallback;
using testing::relative_error;

class JitCudaPool : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
    torch::manual_seed(11);
  }
};

struct Window {
  std::int64_t kernel, stride, padding, dilation;
  bool ceil_mode;
};

// Equal element for element, NaN where eager has NaN.
void expect_same(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  ASSERT_EQ(got.scalar_type(), want.scalar_type()) << what;
  auto g = got.to(at::kFloat), w = want.to(at::kFloat);
  EXPECT_TRUE(torch::equal(g.isnan(), w.isnan())) << what << ": NaN where eager has none, or none where it has";
  auto finite_or_inf = ~w.isnan();
  EXPECT_TRUE(torch::equal(g.masked_select(finite_or_inf), w.masked_select(finite_or_inf))) << what;
}

// x as asked: NCHW, channels-last, or channels-last starting one element past an aligned address.
at::Tensor laid_out(const std::string& layout, at::IntArrayRef sizes, const torch::TensorOptions& options) {
  if (layout == "nchw") return torch::randn(sizes, options);
  if (layout == "channels-last") return torch::randn(sizes, options).contiguous(at::MemoryFormat::ChannelsLast);
  const auto n = sizes[0] * sizes[1] * sizes[2] * sizes[3];
  return torch::randn({n + 1}, options).narrow(0, 1, n).view({sizes[0], sizes[2], sizes[3], sizes[1]}).permute(
      {0, 3, 1, 2});
}

// A few NaN and infinities at random places, so that windows hold them.
at::Tensor with_special_values(at::Tensor x) {
  auto flat = x.permute({0, 2, 3, 1}).reshape({-1}).clone();  // written back below in x's layout
  const auto n = flat.numel();
  auto picks = torch::randint(n, {std::max<std::int64_t>(n / 50, 3)}, torch::TensorOptions().dtype(at::kLong).device(x.device()));
  auto third = picks.size(0) / 3;
  flat.index_fill_(0, picks.narrow(0, 0, third), std::numeric_limits<double>::quiet_NaN());
  flat.index_fill_(0, picks.narrow(0, third, third), -std::numeric_limits<double>::infinity());
  flat.index_fill_(0, picks.narrow(0, 2 * third, picks.size(0) - 2 * third), std::numeric_limits<double>::infinity());
  x.copy_(flat.view({x.size(0), x.size(2), x.size(3), x.size(1)}).permute({0, 3, 1, 2}));
  return x;
}

TEST_F(JitCudaPool, MaxPoolAgainstEagerAcrossDtypesLayoutsAndWindows) {
  torch::NoGradGuard no_grad;
  const std::vector<Window> windows = {{3, 2, 1, 1, false}, {2, 2, 0, 1, false}, {3, 2, 1, 1, true}, {3, 1, 1, 2, false}};
  for (auto dtype : {at::kFloat, at::kHalf, at::kBFloat16}) {
    auto options = torch::TensorOptions().dtype(dtype).device(torch::kCUDA);
    for (std::int64_t channels : {64LL, 12LL, 3LL}) {  // whole vectors of both widths, of four only, none
      for (const char* layout : {"nchw", "channels-last", "channels-last, one element off"}) {
        for (const auto& w : windows) {
          const std::string what = fmt::format("{} C={} {} window {} stride {} padding {} dilation {} ceil {}",
                                               c10::toString(dtype), channels, layout, w.kernel, w.stride, w.padding,
                                               w.dilation, w.ceil_mode);
          auto fn = [w](at::Tensor x) {
            return torch::max_pool2d(x, {w.kernel, w.kernel}, {w.stride, w.stride}, {w.padding, w.padding},
                                     {w.dilation, w.dilation}, w.ceil_mode);
          };
          auto fast = compile(fn, no_fallback("max pool"));
          auto x = laid_out(layout, {2, channels, 17, 17}, options);
          for (int call = 0; call < kCallsPerSignature; ++call) {
            auto input = call == 0 ? x : fresh_like(x);
            if (call == kCallsPerSignature - 1) input = with_special_values(input);
            expect_same(fast(input), fn(input), what + ", " + call_name(call));
          }
          auto report = fast.report();
          EXPECT_EQ(report.nodes_per_backend.count("torch_gpu"), 0u) << what << "\n" << report.to_string();
        }
      }
    }
  }
}

// ResNet's stem at batch 64 in float16 channels-last, as the benchmark runs it: convolution, batch
// norm, ReLU, then the pool, whose input is the fused kernel's result.
TEST_F(JitCudaPool, ResNetStemAgainstEager) {
  torch::NoGradGuard no_grad;
  const auto options = torch::TensorOptions().dtype(at::kHalf).device(torch::kCUDA);
  torch::nn::Conv2d conv(torch::nn::Conv2dOptions(3, 64, 7).stride(2).padding(3).bias(false));
  torch::nn::BatchNorm2d norm(64);
  torch::nn::MaxPool2d pool(torch::nn::MaxPool2dOptions(3).stride(2).padding(1));
  for (auto* m : {static_cast<torch::nn::Module*>(conv.get()), static_cast<torch::nn::Module*>(norm.get())}) {
    m->to(torch::kCUDA, at::kHalf);
    m->eval();
    for (auto& p : m->parameters()) p.requires_grad_(false);  // an inference call: no autograd
  }
  norm->running_mean.normal_();
  norm->running_var.uniform_(0.5, 2.0);
  auto fn = [&](at::Tensor x) { return pool(torch::relu(norm(conv(x)))); };
  auto fast = compile(fn, no_fallback("max pool"));
  auto x = torch::randn({64, 3, 224, 224}, options).contiguous(at::MemoryFormat::ChannelsLast);
  for (int call = 0; call < kCallsPerSignature; ++call) {
    auto input = call == 0 ? x : fresh_like(x);
    auto got = fast(input);
    auto want = fn(input);
    // The convolution and the fused batch norm may round differently from eager's (float16
    // accumulation order, the norm computed in float32 once): compare like the zoo's float16
    // tests, relative to the largest value.
    EXPECT_LE(relative_error(got.to(at::kFloat), want.to(at::kFloat)), 1e-2) << call_name(call);
  }
  // The pool adds no node to what the PyTorch GPU backend runs (the convolution).
  auto without_pool = compile([&](at::Tensor x) { return torch::relu(norm(conv(x))); }, no_fallback("without pool"));
  without_pool(x);
  auto report = fast.report();
  EXPECT_EQ(report.nodes_per_backend["torch_gpu"], without_pool.report().nodes_per_backend["torch_gpu"])
      << report.to_string();
}

}  // namespace
}  // namespace zenith
