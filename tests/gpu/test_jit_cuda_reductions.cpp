// The JIT CUDA backend's row kernels on the GPU: reductions (sum, mean, amax, amin, var, std) and
// normalizations (softmax, log_softmax, layer_norm, the RMSNorm pattern), each with an elementwise
// prologue and epilogue, against eager in float32, float16 and bfloat16, across row lengths and
// layouts, and a float16 softmax decided by eager's rounding (a fully masked attention row).
// Labelled `gpu`.
//
// Tolerances, as max |zenith - eager| / max |eager|:
//  - float32: 1e-5. Both sides accumulate in float32; only the order of the sums differs (a tree
//    over threads here, ATen's own tree there), which moves results by a few ulps of the largest
//    partial sum.
//  - float16 1e-2 and bfloat16 4e-2: the kernel keeps the prologue's intermediates in float32 and
//    rounds once at the store, where eager rounds to the storage type after every op; the
//    difference is a few units in the last place of the storage type (2^-11 and 2^-8).
#include <gtest/gtest.h>

#include <functional>
#include <limits>

#include <fmt/format.h>
#include <torch/torch.h>

#include "common/fresh_inputs.h"
#include "common_relative_error.h"
#include "zenith/compile.h"

namespace zenith {
namespace {

using testing::call_name;
using testing::fresh_like;
using testing::kCallsPerSignature;
using testing::relative_error;

double tolerance(c10::ScalarType dtype) { return dtype == at::kFloat ? 1e-5 : dtype == at::kHalf ? 1e-2 : 4e-2; }

class JitCudaReductions : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
    torch::manual_seed(5);
  }
  static CompileOptions strict() {
    CompileOptions options;
    options.fallback_to_eager = false;
    return options;
  }
};

using Fn = std::function<at::Tensor(at::Tensor, at::Tensor)>;

// Each case reads x [rows..., n] and w [n], with an elementwise prologue and epilogue.
std::vector<std::pair<std::string, Fn>> cases() {
  return {
      {"sum", [](at::Tensor x, at::Tensor) { return (x * 0.5).sum(-1) + 1; }},
      {"sum keepdim epilogue", [](at::Tensor x, at::Tensor) { return torch::relu(x) - torch::relu(x).sum(-1, true) / 64; }},
      {"mean", [](at::Tensor x, at::Tensor w) { return (x * w).mean(-1); }},
      {"amax", [](at::Tensor x, at::Tensor) { return torch::amax(torch::tanh(x), {-1}, true) * 2; }},
      {"amin", [](at::Tensor x, at::Tensor) { return torch::amin(x + 1, {-1}); }},
      {"var", [](at::Tensor x, at::Tensor) { return torch::var(x * 2, {-1}, /*unbiased=*/true, /*keepdim=*/false); }},
      {"std", [](at::Tensor x, at::Tensor) { return torch::std(x, {-1}, /*unbiased=*/false, /*keepdim=*/true) + 1; }},
      {"softmax", [](at::Tensor x, at::Tensor w) { return torch::softmax(x * 0.125 + w, -1); }},
      {"log_softmax", [](at::Tensor x, at::Tensor) { return torch::log_softmax(x * 3, -1); }},
      {"layer_norm", [](at::Tensor x, at::Tensor w) {
         return torch::layer_norm(x + 1, {x.size(-1)}, w, w * 0.5 - 1, 1e-5);
       }},
      {"rms_norm", [](at::Tensor x, at::Tensor w) {
         auto variance = x.pow(2).mean(-1, true);
         return x * torch::rsqrt(variance + 1e-6) * w;
       }},
  };
}

// x laid out as asked: contiguous, transposed (rows are strided), sliced, or misaligned by one.
at::Tensor laid_out(const std::string& layout, std::int64_t rows, std::int64_t n, const torch::TensorOptions& options) {
  if (layout == "transposed") return torch::randn({n, rows}, options).t();
  if (layout == "sliced") return torch::randn({rows, n + 5}, options).narrow(1, 2, n);
  if (layout == "misaligned") return torch::randn({rows * n + 1}, options).narrow(0, 1, rows * n).view({rows, n});
  return torch::randn({rows, n}, options);
}

TEST_F(JitCudaReductions, EveryReductionAgainstEagerAcrossDtypesLengthsAndLayouts) {
  torch::NoGradGuard no_grad;
  for (auto dtype : {at::kFloat, at::kHalf, at::kBFloat16}) {
    auto options = torch::TensorOptions().dtype(dtype).device(torch::kCUDA);
    for (std::int64_t n : {1LL, 7LL, 128LL, 4096LL, 4097LL}) {  // 4,096 the longest row held in registers
      for (const char* layout : {"contiguous", "transposed", "sliced", "misaligned"}) {
        for (const auto& [name, fn] : cases()) {
          if (n == 1 && name == "var") continue;  // eager divides by n - 1 = 0: both NaN/inf
          auto fast = compile(fn, strict());
          for (int call = 0; call < kCallsPerSignature; ++call) {
            auto x = laid_out(layout, 6, n, options);
            auto w = torch::randn({n}, options);
            auto got = fast(x, w);
            auto want = fn(x, w);
            ASSERT_EQ(got.sizes(), want.sizes()) << name;
            EXPECT_LE(relative_error(got.to(at::kFloat), want.to(at::kFloat)), tolerance(dtype))
                << name << " " << c10::toString(dtype) << " n=" << n << " " << layout << ", " << call_name(call);
          }
          auto report = fast.report();
          EXPECT_EQ(report.nodes_per_backend.count("torch_gpu"), 0u) << name << "\n" << report.to_string();
        }
      }
    }
  }
}

TEST_F(JitCudaReductions, MasksMultiDimensionRowsAndCorrections) {
  torch::NoGradGuard no_grad;
  auto x = torch::randn({4, 6, 10, 12}, torch::kCUDA).transpose(1, 2);  // strided rows of two dimensions
  auto mask = torch::rand({12, 12}, torch::kCUDA) > 0.7;
  std::vector<std::pair<std::string, std::function<at::Tensor(at::Tensor)>>> cases = {
      {"masked_fill -inf then softmax", [mask](at::Tensor t) {
         auto s = t.contiguous().view({-1, 12, 12}) * 0.5;
         return torch::softmax(s.masked_fill(mask, -std::numeric_limits<double>::infinity()), -1);
       }},
      {"mean over two inner dims", [](at::Tensor t) { return t - t.mean({-2, -1}, true); }},
      {"amax over two inner dims", [](at::Tensor t) { return torch::amax(t * 2, {-2, -1}); }},
      {"layer_norm over two dims, no affine", [](at::Tensor t) { return torch::layer_norm(t + 1, {6, 12}); }},
      {"var with a fractional correction", [](at::Tensor t) {
         return torch::var(t, at::IntArrayRef{-1}, /*correction=*/c10::Scalar(0.5), /*keepdim=*/true) * t;
       }},
  };
  for (const auto& [name, fn] : cases) {
    auto fast = compile(fn, strict());
    for (int call = 0; call < kCallsPerSignature; ++call) {
      auto input = call == 0 ? x : fresh_like(x);  // the same strided view, fresh values
      EXPECT_LE(relative_error(fast(input), fn(input)), 1e-5) << name << ", " << call_name(call);
    }
    EXPECT_EQ(fast.report().nodes_per_backend.count("torch_gpu"), 0u) << name << "\n" << fast.report().to_string();
  }
}

TEST_F(JitCudaReductions, OneLongRowAndManyShortOnes) {
  torch::NoGradGuard no_grad;
  auto fn = [](at::Tensor x) { return torch::softmax(x, -1) * 2; };
  auto fast = compile(fn, strict());
  for (auto sizes : {std::vector<std::int64_t>{1, 1 << 20}, std::vector<std::int64_t>{1 << 16, 3}}) {
    for (int call = 0; call < kCallsPerSignature; ++call) {
      auto x = torch::randn(sizes, torch::kCUDA);
      EXPECT_LE(relative_error(fast(x), fn(x)), 1e-5) << sizes << ", " << call_name(call);
    }
  }
  auto total = [](at::Tensor x) { return (x * x).sum(); };
  auto fast_total = compile(total, strict());
  for (int call = 0; call < kCallsPerSignature; ++call) {
    auto x = torch::randn({1000, 1000}, torch::kCUDA);
    EXPECT_LE(relative_error(fast_total(x), total(x)), 1e-5) << call_name(call);
  }
}

TEST_F(JitCudaReductions, AttentionSoftmaxAndNormsAreOneKernelEach) {
  torch::NoGradGuard no_grad;
  auto attention = [](at::Tensor scores, at::Tensor mask) { return torch::softmax(scores / 8.0 + mask, -1); };
  auto fast = compile(attention, strict());
  for (int call = 0; call < kCallsPerSignature; ++call) {
    auto scores = torch::randn({2, 12, 128, 128}, torch::kCUDA), mask = torch::randn({128, 128}, torch::kCUDA);
    EXPECT_LE(relative_error(fast(scores, mask), attention(scores, mask)), 1e-5) << call_name(call);
  }
  EXPECT_EQ(fast.report().groups, 1) << fast.report().to_string();

  auto norm = [](at::Tensor x, at::Tensor residual) {
    auto h = x + residual;
    auto variance = h.pow(2).mean(-1, true);
    return std::make_tuple(h, h * torch::rsqrt(variance + 1e-6));
  };
  auto fast_norm = compile(norm, strict());
  for (int call = 0; call < kCallsPerSignature; ++call) {
    auto x = torch::randn({4, 33, 256}, torch::kCUDA), residual = torch::randn({4, 33, 256}, torch::kCUDA);
    auto [h, y] = fast_norm(x, residual);
    auto [h_eager, y_eager] = norm(x, residual);
    EXPECT_LE(relative_error(h, h_eager), 1e-6) << call_name(call);  // one float32 add, rounded alike
    EXPECT_LE(relative_error(y, y_eager), 1e-5) << call_name(call);
  }
  EXPECT_EQ(fast_norm.report().groups, 1) << "residual add and RMSNorm, two outputs, one kernel";
}

// Attention's softmax over float16 scores plus an additive mask of float16's lowest, a query whose
// every key is masked: eager rounds each sum to a multiple of 32 (-65504 for scores within 16 of
// 0), so it weighs that query's keys about evenly; the kernel must read the sums as eager holds
// them, not the softmax of the scores its float32 registers would give.
TEST_F(JitCudaReductions, AFullyMaskedFloat16RowIsWeighedAsEagerRoundsIt) {
  torch::NoGradGuard no_grad;
  auto attention = [](at::Tensor scores, at::Tensor mask) { return torch::softmax(scores * 0.125 + mask, -1); };
  auto fast = compile(attention, strict());
  const double lowest = static_cast<double>(std::numeric_limits<c10::Half>::lowest());
  const auto options = torch::TensorOptions().dtype(at::kHalf).device(torch::kCUDA);
  for (int call = 0; call < kCallsPerSignature; ++call) {
    auto scores = torch::randn({2, 4, 9, 40}, options) * 8;
    auto hidden = torch::rand({2, 1, 9, 40}, options.dtype(at::kFloat)) < 0.3;
    hidden.select(3, 0).fill_(false);
    hidden.select(2, call % 9).fill_(true);  // that query's every key
    auto mask = torch::zeros({2, 1, 9, 40}, options).masked_fill(hidden, lowest);
    auto got = fast(scores, mask), want = attention(scores, mask);
    EXPECT_LE(relative_error(got, want), tolerance(at::kHalf)) << call_name(call);
  }
  EXPECT_EQ(fast.report().groups, 1) << fast.report().to_string();
}

// Rows of 128 take the vector path when their operands are aligned (four elements a load: a
// boolean mask four bytes at a time, a boolean result stored four at a time) and the element path
// when they start one element off: both against eager, in every dtype.
TEST_F(JitCudaReductions, BooleanRowsOnTheVectorPathAndOffIt) {
  torch::NoGradGuard no_grad;
  auto masked = [](at::Tensor x, at::Tensor hidden) { return torch::softmax(x.masked_fill(hidden, -1e4), -1); };
  auto above = [](at::Tensor x, at::Tensor) { return x > torch::amax(x, {-1}, true) * 0.5; };
  auto rows = [](bool misaligned, const torch::TensorOptions& options) {
    if (!misaligned) return torch::empty({6, 128}, options);
    return torch::empty({6 * 128 + 1}, options).narrow(0, 1, 6 * 128).view({6, 128});
  };
  for (auto dtype : {at::kFloat, at::kHalf, at::kBFloat16}) {
    const auto options = torch::TensorOptions().dtype(dtype).device(torch::kCUDA);
    for (bool misaligned : {false, true}) {
      auto fast_masked = compile(masked, strict()), fast_above = compile(above, strict());
      for (int call = 0; call < kCallsPerSignature; ++call) {
        auto x = rows(misaligned, options).normal_();
        auto hidden = rows(misaligned, options.dtype(at::kBool)).copy_(torch::rand({6, 128}, torch::kCUDA) < 0.3);
        const auto where =
            fmt::format("{} {}, {}", c10::toString(dtype), misaligned ? "misaligned" : "aligned", call_name(call));
        const auto got = fast_masked(x, hidden).to(at::kFloat), want = masked(x, hidden).to(at::kFloat);
        EXPECT_LE(relative_error(got, want), tolerance(dtype)) << where;
        // amax is exact and halving it too: the comparison gives eager's booleans exactly.
        EXPECT_TRUE(torch::equal(fast_above(x, hidden), above(x, hidden))) << where;
      }
      for (auto* fast : {&fast_masked, &fast_above}) {
        EXPECT_EQ(fast->report().nodes_per_backend.count("torch_gpu"), 0u) << fast->report().to_string();
      }
    }
  }
}

TEST_F(JitCudaReductions, ANewSequenceLengthReusesTheKernels) {
  torch::NoGradGuard no_grad;
  auto fn = [](at::Tensor x, at::Tensor w) { return torch::layer_norm(x * 2, {x.size(-1)}, w, {}, 1e-5); };
  auto fast = compile(fn, strict());
  for (std::int64_t length : {100, 101, 513}) {
    for (int call = 0; call < kCallsPerSignature; ++call) {
      auto x = torch::randn({8, length, 64}, torch::kCUDA), w = torch::randn({64}, torch::kCUDA);
      EXPECT_LE(relative_error(fast(x, w), fn(x, w)), 1e-5) << "length " << length << ", " << call_name(call);
    }
    if (length != 100) {
      EXPECT_EQ(fast.report().kernels_compiled, 0) << "length " << length;
    }
  }
}

}  // namespace
}  // namespace zenith
