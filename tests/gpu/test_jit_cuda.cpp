// The JIT CUDA backend on the GPU: every fusible elementwise op against eager in float32, float16
// and bfloat16 at sizes 1 to 2^20 on contiguous, transposed, sliced and misaligned inputs, fused
// chains with broadcast operands, matrix products with their cuBLASLt epilogue or as the
// matrix-vector kernel, and the kernel
// cache across sizes. Labelled `gpu`. Every signature is called on fresh values after its capture
// (kCallsPerSignature calls), each compared with eager on the same values.
//
// Tolerances: float32 kernels evaluate in float32 like eager, so they agree to 1e-5 relative to
// the largest value. float16 and bfloat16 kernels keep intermediates in float32 and round once at
// the store, where eager rounds after every op; the difference is a few units in the last place of
// the storage type: 1e-2 (float16) and 4e-2 (bfloat16) relative to the largest value.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

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

double tolerance(c10::ScalarType dtype) {
  return dtype == at::kFloat ? 1e-5 : dtype == at::kHalf ? 1e-2 : 4e-2;
}

class JitCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
    torch::manual_seed(21);
  }
  static CompileOptions strict() {
    CompileOptions options;
    options.fallback_to_eager = false;
    return options;
  }
};

at::Tensor chain(at::Tensor x, at::Tensor a, at::Tensor b, at::Tensor c) { return torch::gelu(x * a + b) * c; }

TEST_F(JitCuda, FusedChainAcrossDtypesAndSizes) {
  torch::NoGradGuard no_grad;
  for (auto dtype : {at::kFloat, at::kHalf, at::kBFloat16}) {
    for (std::int64_t n : {1LL, 7LL, 128LL, 4097LL, 1LL << 20}) {
      auto options = torch::TensorOptions().dtype(dtype).device(torch::kCUDA);
      auto fast = compile(&chain, strict());
      for (int call = 0; call < kCallsPerSignature; ++call) {
        auto x = torch::randn({n}, options), a = torch::randn({n}, options);
        auto b = torch::randn({n}, options), c = torch::randn({n}, options);
        auto got = fast(x, a, b, c);
        EXPECT_LE(relative_error(got.to(at::kFloat), chain(x, a, b, c).to(at::kFloat)), tolerance(dtype))
            << c10::toString(dtype) << " n=" << n << ", " << call_name(call);
      }
      auto report = fast.report();
      ASSERT_EQ(report.nodes_per_backend.count("jit_cuda"), 1u) << report.to_string();
      EXPECT_EQ(report.nodes_per_backend.at("jit_cuda"), 4);
      EXPECT_EQ(report.groups, 1) << "four elementwise ops, one kernel";
    }
  }
}

TEST_F(JitCuda, LayoutsBroadcastsAndMisalignment) {
  torch::NoGradGuard no_grad;
  auto options = torch::TensorOptions().device(torch::kCUDA);
  auto base = torch::randn({257, 130}, options);
  std::vector<std::pair<std::string, at::Tensor>> inputs = {
      {"transposed", base.t()},
      {"sliced", base.slice(1, 1, 129)},
      {"misaligned by one element", base.flatten().narrow(0, 1, 257 * 128).view({257, 128})},
  };
  for (const auto& [what, first] : inputs) {
    auto fn = [](at::Tensor x, at::Tensor row, at::Tensor s) { return torch::sigmoid(x * s + row) - x; };
    auto fast = compile(fn, strict());
    for (int call = 0; call < kCallsPerSignature; ++call) {
      auto x = call == 0 ? first : fresh_like(first);  // the same view of a storage of its own
      auto row = torch::randn({x.size(1)}, options);   // broadcast over rows
      auto scalar = torch::randn({}, options);         // 0-d
      EXPECT_LE(relative_error(fast(x, row, scalar), fn(x, row, scalar)), 1e-5) << what << ", " << call_name(call);
    }
    EXPECT_EQ(fast.report().nodes_per_backend.at("jit_cuda"), 4) << what;
  }
}

// Channels-last activations with a per-channel scale and a residual, as in a convolutional
// network: the kernel iterates in memory order (tests/cuda/test_elementwise_codegen.cpp checks
// the order); here the results must match eager in three dtypes and odd sizes.
TEST_F(JitCuda, ChannelsLastRunsInMemoryOrder) {
  torch::NoGradGuard no_grad;
  for (auto dtype : {at::kFloat, at::kHalf, at::kBFloat16}) {
    auto options = torch::TensorOptions().device(torch::kCUDA).dtype(dtype);
    auto fn = [](at::Tensor x, at::Tensor scale) { return torch::relu(x * scale + x); };
    auto fast = compile(fn, strict());
    for (int call = 0; call < kCallsPerSignature; ++call) {
      auto x = torch::randn({3, 24, 13, 11}, options).contiguous(at::MemoryFormat::ChannelsLast);
      auto scale = torch::randn({24, 1, 1}, options);
      auto got = fast(x, scale);
      auto want = fn(x, scale);
      EXPECT_TRUE(got.is_contiguous(at::MemoryFormat::ChannelsLast)) << c10::toString(dtype) << ", " << call_name(call);
      EXPECT_LE(relative_error(got.to(at::kFloat), want.to(at::kFloat)), dtype == at::kFloat ? 1e-6 : 1e-2)
          << c10::toString(dtype) << ", " << call_name(call);
    }
    EXPECT_EQ(fast.report().nodes_per_backend.at("jit_cuda"), 3) << c10::toString(dtype);
  }
}

// A relayout: a row-major weight scaled per output channel and written channels-last (the
// convolution epilogue's per-call fold). Where the elements after the channels are at most 64
// (3x3, 7x7, 1x5) each thread walks them in the weight's order (tests/cuda/test_elementwise_codegen.cpp
// checks the choice); 9x9 iterates in the output's order. Results must be eager's, exactly in
// float32 (one multiply a value either way) and within a rounding in float16.
TEST_F(JitCuda, ARelayoutMatchesEagerWhicheverWayItIterates) {
  torch::NoGradGuard no_grad;
  const std::vector<std::vector<std::int64_t>> shapes = {{64, 32, 3, 3}, {5, 3, 7, 7}, {7, 6, 1, 5}, {4, 3, 9, 9}};
  for (auto dtype : {at::kFloat, at::kHalf}) {
    auto options = torch::TensorOptions().device(torch::kCUDA).dtype(dtype);
    auto fn = [](at::Tensor w, at::Tensor scale) { return (w * scale).clone(at::MemoryFormat::ChannelsLast); };
    for (const auto& sizes : shapes) {
      auto fast = compile(fn, strict());
      for (int call = 0; call < kCallsPerSignature; ++call) {
        auto w = torch::randn(sizes, options), scale = torch::randn({sizes[0], 1, 1, 1}, options);
        auto got = fast(w, scale);
        auto want = fn(w, scale);
        const auto where = std::string(c10::toString(dtype)) + " " + c10::str(sizes) + ", " + call_name(call);
        EXPECT_TRUE(got.is_contiguous(at::MemoryFormat::ChannelsLast)) << where;
        EXPECT_LE(relative_error(got.to(at::kFloat), want.to(at::kFloat)), dtype == at::kFloat ? 0.0 : 1e-3) << where;
      }
      EXPECT_EQ(fast.report().nodes_per_backend.at("jit_cuda"), 2) << c10::str(sizes);
    }
  }
}

// Per-channel operands ([C, 1, 1], and a [W] bias along the rows) are read along one axis: on the
// vector path where the sizes keep vectors within a channel (NCHW: H*W a multiple of the vector
// width) or aligned to channel 0 (channels-last: C a multiple), element by element elsewhere.
TEST_F(JitCuda, PerChannelOperandsOnAndOffTheVectorPath) {
  torch::NoGradGuard no_grad;
  const std::vector<std::vector<std::int64_t>> shapes = {{2, 8, 4, 4}, {2, 8, 7, 7}, {2, 16, 3, 3}, {2, 12, 3, 3}, {3, 5, 2, 3}};
  for (auto dtype : {at::kFloat, at::kHalf, at::kBFloat16}) {
    auto options = torch::TensorOptions().device(torch::kCUDA).dtype(dtype);
    auto fn = [](at::Tensor x, at::Tensor scale, at::Tensor shift, at::Tensor row) {
      return torch::relu(x * scale + shift) + row;
    };
    for (auto format : {at::MemoryFormat::Contiguous, at::MemoryFormat::ChannelsLast}) {
      auto fast = compile(fn, strict());
      for (const auto& sizes : shapes) {
        for (int call = 0; call < kCallsPerSignature; ++call) {
          auto x = torch::randn(sizes, options).contiguous(format);
          auto scale = torch::randn({sizes[1], 1, 1}, options), shift = torch::randn({sizes[1], 1, 1}, options);
          auto row = torch::randn({sizes[3]}, options);
          EXPECT_LE(relative_error(fast(x, scale, shift, row).to(at::kFloat), fn(x, scale, shift, row).to(at::kFloat)),
                    tolerance(dtype))
              << c10::toString(dtype) << " " << c10::str(sizes) << (format == at::MemoryFormat::ChannelsLast ? " channels-last, " : ", ")
              << call_name(call);
        }
        EXPECT_EQ(fast.report().groups, 1) << c10::str(sizes);
      }
    }
  }
}

// x [3, n] laid out as asked: contiguous, transposed, sliced, or misaligned by one element.
at::Tensor laid_out(const std::string& layout, std::int64_t n, const torch::TensorOptions& options) {
  if (layout == "transposed") return torch::randn({n, 3}, options).t();
  if (layout == "sliced") return torch::randn({3, n + 5}, options).narrow(1, 2, n);
  if (layout == "misaligned") return torch::randn({3 * n + 1}, options).narrow(0, 1, 3 * n).view({3, n});
  return torch::randn({3, n}, options);
}

TEST_F(JitCuda, EveryFusibleOpAcrossDtypesSizesAndLayouts) {
  torch::NoGradGuard no_grad;
  std::vector<std::pair<std::string, std::function<at::Tensor(at::Tensor)>>> ops = {
      {"relu", [](at::Tensor t) { return torch::relu(t) * 2; }},
      {"gelu tanh", [](at::Tensor t) { return torch::gelu(t, "tanh") * 2; }},
      {"silu", [](at::Tensor t) { return torch::silu(t) * 2; }},
      {"sigmoid", [](at::Tensor t) { return torch::sigmoid(t) * 2; }},
      {"tanh", [](at::Tensor t) { return torch::tanh(t) * 2; }},
      {"exp", [](at::Tensor t) { return torch::exp(t) * 2; }},
      {"abs log", [](at::Tensor t) { return torch::log(torch::abs(t) + 1); }},
      {"rsqrt", [](at::Tensor t) { return torch::rsqrt(torch::abs(t) + 1); }},
      {"pow", [](at::Tensor t) { return torch::pow(t, 2) + torch::pow(torch::abs(t), 1.7); }},
      {"clamp", [](at::Tensor t) { return torch::clamp(t, -1, 1) * 2; }},
      {"leaky_relu", [](at::Tensor t) { return torch::leaky_relu(t, 0.1) * 2; }},
      {"hardswish", [](at::Tensor t) { return torch::hardswish(t) * 2; }},
      {"softplus", [](at::Tensor t) { return torch::softplus(t) * 2; }},
      {"neg sub div", [](at::Tensor t) { return (-t - 1) / (t * t + 1); }},
      {"expm1 log1p", [](at::Tensor t) { return torch::expm1(t * 0.1) + torch::log1p(torch::abs(t)); }},
      {"floor ceil round", [](at::Tensor t) { return torch::floor(t) + torch::ceil(t * 2) + torch::round(t * 3); }},
      {"elu mish", [](at::Tensor t) { return torch::elu(t) + torch::mish(t); }},
      {"hardtanh relu6", [](at::Tensor t) { return torch::hardtanh(t, -0.5, 0.5) + torch::relu6(t * 4); }},
      {"lerp addcmul addcdiv", [](at::Tensor t) {
         return torch::lerp(t, t * t, 0.3) + torch::addcmul(t, t, t, 0.5) + torch::addcdiv(t, t, t * t + 1, 2);
       }},
      {"where comparisons", [](at::Tensor t) {
         return torch::where(torch::logical_and(t > 0.5, t <= 2.0), t * 2, -t) + (t == t).to(t.dtype());
       }},
      {"masked_fill", [](at::Tensor t) { return t.masked_fill(t < -1, -1e4) * 0.5; }},
  };
  for (auto dtype : {at::kFloat, at::kHalf, at::kBFloat16}) {
    auto options = torch::TensorOptions().dtype(dtype).device(torch::kCUDA);
    for (const auto& [name, fn] : ops) {
      auto fast = compile(fn, strict());  // one module; every size and layout is a signature of its own
      for (std::int64_t n : {1LL, 7LL, 128LL, 4097LL, 1LL << 20}) {
        for (const char* layout : {"contiguous", "transposed", "sliced", "misaligned"}) {
          for (int call = 0; call < kCallsPerSignature; ++call) {
            auto x = laid_out(layout, n, options) * 1.5;  // exp stays inside float16
            EXPECT_LE(relative_error(fast(x).to(at::kFloat), fn(x).to(at::kFloat)), tolerance(dtype))
                << name << " " << c10::toString(dtype) << " n=" << n << " " << layout << ", " << call_name(call);
          }
          EXPECT_GE(fast.report().nodes_per_backend.count("jit_cuda"), 1u) << name;
        }
      }
    }
  }
}

TEST_F(JitCuda, DiscontinuousOpsSeeWhatEagerSees) {
  torch::NoGradGuard no_grad;
  // Comparisons and floor read float16 intermediates rounded as eager stores them, a bool sum stays
  // a bool, a bool compared with 0.5 is compared in float, and NaN passes hard activations. A wrong
  // choice flips a selection and moves the result by its own size.
  auto draw = [] { return torch::randn({4, 1000}, torch::TensorOptions().dtype(at::kHalf).device(torch::kCUDA)) * 3; };
  std::vector<std::pair<std::string, std::function<at::Tensor(at::Tensor)>>> ops = {
      {"compare a half intermediate", [](at::Tensor t) { return torch::where((t * 0.1) > 0.1, t, -t); }},
      {"floor a half intermediate", [](at::Tensor t) { return torch::floor(t * 0.7) + t; }},
      {"bool sum", [](at::Tensor t) { return ((t > 0) + (t < 1)).to(t.scalar_type()) * t; }},
      {"bool against scalars", [](at::Tensor t) {
         auto b = t > 0;
         return (b > 0.5).to(t.scalar_type()) + (b == 2).to(t.scalar_type()) * 4 + t;
       }},
      {"NaN through hard activations", [](at::Tensor t) {
         auto n = t.masked_fill(t > 2, std::numeric_limits<double>::quiet_NaN());
         return torch::nan_to_num(torch::hardsigmoid(n) + torch::hardswish(n), 123.0);
       }},
  };
  for (const auto& [name, fn] : ops) {
    auto fast = compile(fn, strict());
    for (int call = 0; call < kCallsPerSignature; ++call) {
      auto x = draw();
      EXPECT_LE(relative_error(fast(x).to(at::kFloat), fn(x).to(at::kFloat)), 1e-2) << name << ", " << call_name(call);
    }
    EXPECT_GE(fast.report().nodes_per_backend.count("jit_cuda"), 1u) << name;
  }
}

TEST_F(JitCuda, AnIntermediateOfASmallerShapeIsStoredOnce) {
  torch::NoGradGuard no_grad;
  // t broadcasts into y and is returned too: one kernel over y's elements writes each of t's once.
  auto fn = [](at::Tensor x, at::Tensor v) {
    auto t = torch::sigmoid(v) * 2;
    return std::make_tuple(torch::relu(x + t), t);
  };
  auto fast = compile(fn, strict());
  for (int call = 0; call < kCallsPerSignature; ++call) {
    auto x = torch::randn({16, 7, 8}, torch::kCUDA), v = torch::randn({1, 7, 8}, torch::kCUDA);
    auto [y, t] = fast(x, v);
    auto [y_eager, t_eager] = fn(x, v);
    EXPECT_LE(relative_error(y, y_eager), 1e-5) << call_name(call);
    EXPECT_LE(relative_error(t, t_eager), 1e-5) << call_name(call);
  }
  EXPECT_EQ(fast.report().groups, 1) << fast.report().to_string();
}

TEST_F(JitCuda, MatrixProductsWithTheirEpilogueAreOneCublasLtCall) {
  torch::NoGradGuard no_grad;
  // Tolerances as in test_cublaslt_matmul.cpp: float32 products in another summation order (K=256).
  auto linear_relu = [](at::Tensor x, at::Tensor w, at::Tensor b) { return torch::relu(torch::linear(x, w, b)); };
  auto mm_bias_gelu = [](at::Tensor x, at::Tensor w, at::Tensor b) { return torch::gelu(torch::mm(x, w.t()) + b, "tanh"); };
  for (const auto& fn : {std::function<at::Tensor(at::Tensor, at::Tensor, at::Tensor)>(linear_relu),
                         std::function<at::Tensor(at::Tensor, at::Tensor, at::Tensor)>(mm_bias_gelu)}) {
    auto fast = compile(fn, strict());
    // 77 rows, then another row count (the same program); each on fresh values at every call.
    for (std::int64_t rows : {77, 300}) {
      for (int call = 0; call < kCallsPerSignature; ++call) {
        auto x = torch::randn({rows, 256}, torch::kCUDA), w = torch::randn({96, 256}, torch::kCUDA) * 0.1;
        auto b = torch::randn({96}, torch::kCUDA);
        EXPECT_LE(relative_error(fast(x, w, b), fn(x, w, b)), 2e-4) << rows << " rows, " << call_name(call);
      }
      auto report = fast.report();
      EXPECT_EQ(report.groups, 1) << report.to_string();
      EXPECT_EQ(report.nodes_per_backend.count("torch_gpu"), 0u) << report.to_string();
    }
  }
}

// One row in linear's form runs as the generated matrix-vector kernel (matrix_vector.h), which
// splits each dot product over lanes and warps and sums in float32 in another order than
// cuBLASLt: tolerances as above, float32 1e-5·sqrt(K) (at least 2e-4 with GELU's tanh). Shapes
// with one row, with leading dims of one folded in, with N = 2 and K = 4096 (four warps share an
// element), a long N, and the decoder's down projection (2048 x 5632: two warps a row, eleven
// chunks a lane, so full batches of four and a partial one), in every dtype, with and without
// bias and activation; K = 264 and 72 leave partial batches too. Two shapes of several rows run
// on cuBLASLt, and no kernel is built for them.
TEST_F(JitCuda, ProductsOfOneRowRunAsTheMatrixVectorKernel) {
  torch::NoGradGuard no_grad;
  using Fn = std::function<at::Tensor(at::Tensor, at::Tensor, at::Tensor)>;
  const std::vector<std::pair<std::string, Fn>> forms = {
      {"linear", [](at::Tensor x, at::Tensor w, at::Tensor) { return torch::linear(x, w); }},
      {"linear+bias relu", [](at::Tensor x, at::Tensor w, at::Tensor b) { return torch::relu(torch::linear(x, w, b)); }},
      {"linear+bias gelu", [](at::Tensor x, at::Tensor w, at::Tensor b) { return torch::gelu(torch::linear(x, w, b), "tanh"); }},
  };
  struct Shape {
    std::vector<std::int64_t> x;
    std::int64_t n;
  };
  const std::vector<Shape> shapes = {{{1, 2048}, 300},   {{1, 4096}, 2},     {{1, 1, 264}, 64}, {{1, 1, 72}, 5000},
                                     {{1, 5632}, 2048}, {{2, 4, 264}, 64}, {{8, 5632}, 2048}};
  for (auto dtype : {at::kFloat, at::kHalf, at::kBFloat16}) {
    const auto options = torch::TensorOptions().dtype(dtype).device(torch::kCUDA);
    for (const auto& [name, fn] : forms) {
      for (const auto& shape : shapes) {
        auto fast = compile(fn, strict());
        const auto k = shape.x.back();
        const double tol = dtype == at::kFloat ? std::max(1e-5 * std::sqrt(static_cast<double>(k)),
                                                          name.find("gelu") != std::string::npos ? 2e-4 : 0.0)
                                               : tolerance(dtype);
        for (int call = 0; call < kCallsPerSignature; ++call) {
          auto x = torch::randn(shape.x, options), w = torch::randn({shape.n, k}, options) * 0.1;
          auto b = torch::randn({shape.n}, options);
          EXPECT_LE(relative_error(fast(x, w, b).to(at::kFloat), fn(x, w, b).to(at::kFloat)), tol)
              << name << " " << c10::toString(dtype) << " x " << shape.x << " N " << shape.n << ", " << call_name(call);
        }
        auto report = fast.report();
        EXPECT_EQ(report.groups, 1) << report.to_string();
        const bool one_row = shape.x.size() == 2 ? shape.x[0] == 1 : shape.x[0] * shape.x[1] == 1;
        EXPECT_EQ(report.kernels_compiled + report.kernel_cache_hits, one_row ? 1 : 0)
            << "the product's matrix-vector kernel built for one row only: " << report.to_string();
      }
    }
  }
}

TEST_F(JitCuda, ANewSizeReusesTheKernelFromTheCache) {
  torch::NoGradGuard no_grad;
  auto fn = [](at::Tensor x) { return torch::tanh(x * 0.25 + 1.0) * x; };
  auto fast = compile(fn, strict());
  for (int call = 0; call < kCallsPerSignature; ++call) {
    auto x = torch::randn({32, 100, 64}, torch::kCUDA);
    EXPECT_LE(relative_error(fast(x), fn(x)), 1e-5) << "length 100, " << call_name(call);
  }
  for (std::int64_t length : {101, 257, 999}) {
    for (int call = 0; call < kCallsPerSignature; ++call) {
      auto x = torch::randn({32, length, 64}, torch::kCUDA);
      EXPECT_LE(relative_error(fast(x), fn(x)), 1e-5) << "length " << length << ", " << call_name(call);
    }
    auto report = fast.report();
    EXPECT_EQ(report.kernels_compiled, 0) << "length " << length << ": " << report.to_string();
    EXPECT_EQ(report.kernel_cache_hits, 1) << "length " << length;
  }
}

}  // namespace
}  // namespace zenith
