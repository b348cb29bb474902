// The JIT CUDA backend's attention kernel (backends/cuda/attention_codegen.h) on the GPU, against
// eager's scaled_dot_product_attention on fresh inputs: a decode step's grouped queries over a
// static cache with the unwritten slots masked, more keys than one tile and more rows than one
// block, bool masks that differ by row, a query that sees no key (0, where eager's cuDNN backend
// differs), a query whose every key carries the lowest finite mask (0, as PyTorch's kernels give),
// written-out attention whose data mask hides every key from some queries (attention_blind_rows
// after the fused node: eager's written-out rows), no mask with an explicit scale, strided
// operands, keys and values read an element at a time, and a prompt's many queries, which stay
// on PyTorch's kernels. Labelled gpu.
//
// Tolerances, as max |zenith - eager| / max |eager|: float32 1e-4 (both accumulate in float32;
// the kernel sums keys in another order and takes exp2 of log2-scaled scores); float16 1e-2 and
// bfloat16 4e-2 (eager's fused kernels round the probabilities to the storage type before
// multiplying the values, the kernel keeps them in float32: a few units in the last place).
#include <gtest/gtest.h>

#include <array>
#include <functional>
#include <limits>

#include <torch/torch.h>

#include "common/cudnn_attention_off.h"
#include "common/fresh_inputs.h"
#include "common/lowest_finite.h"
#include "common/pass_counter.h"
#include "common_relative_error.h"
#include "zenith/compile.h"

namespace zenith {
namespace {

using testing::call_name;
using testing::kCallsPerSignature;
using testing::relative_error;

double tolerance(c10::ScalarType dtype) { return dtype == at::kFloat ? 1e-4 : dtype == at::kHalf ? 1e-2 : 4e-2; }

CompileOptions strict() {
  CompileOptions options;
  options.fallback_to_eager = false;
  return options;
}

std::int64_t nodes_on(const CompileReport& report, const std::string& backend) {
  return report.nodes_per_backend.count(backend) ? report.nodes_per_backend.at(backend) : 0;
}

class JitCudaAttention : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
    torch::manual_seed(17);
  }
};

// Masked attention through the kernel, in float32 and float16: every call's result against
// eager's on operands `draw` makes afresh (query, key, value, mask, in that order), and no node
// left to PyTorch's plugin.
void expect_masked_attention_as_eager(
    const std::function<std::array<at::Tensor, 4>(const torch::TensorOptions&)>& draw) {
  auto fn = [](at::Tensor q, at::Tensor k, at::Tensor v, at::Tensor mask) {
    return at::scaled_dot_product_attention(q, k, v, mask);
  };
  for (auto dtype : {at::kFloat, at::kHalf}) {
    auto options = torch::TensorOptions().dtype(dtype).device(torch::kCUDA);
    auto fast = compile(fn, strict());
    for (int call = 0; call < kCallsPerSignature; ++call) {
      auto [q, k, v, mask] = draw(options);
      auto got = fast(q, k, v, mask), want = fn(q, k, v, mask);
      EXPECT_LE(relative_error(got.to(at::kFloat), want.to(at::kFloat)), tolerance(dtype))
          << c10::toString(dtype) << ", " << call_name(call);
    }
    EXPECT_EQ(nodes_on(fast.report(), "torch_gpu"), 0) << fast.report().to_string();
  }
}

// A static cache's mask for a token at `position`: 0 up to it, the lowest finite value after, as
// a decoder builds it.
at::Tensor cache_mask(std::int64_t position, std::int64_t slots, const torch::TensorOptions& options) {
  auto slot = torch::arange(slots, options.dtype(at::kLong)).unsqueeze(0);
  const double lowest = testing::lowest_finite(options.dtype().toScalarType());
  return torch::zeros({1, slots}, options).masked_fill(slot > position, lowest);
}

TEST_F(JitCudaAttention, ADecodeStepOverAStaticCacheRunsInTheKernel) {
  torch::NoGradGuard no_grad;
  // Four key-value heads, each read by eight query heads' one token as eight rows; 256 slots.
  const std::int64_t batch = 1, kv_heads = 4, group = 8, slots = 256, dim = 64;
  auto fn = [](at::Tensor q, at::Tensor k, at::Tensor v, at::Tensor mask) {
    return at::scaled_dot_product_attention(q, k, v, mask);
  };
  for (auto dtype : {at::kFloat, at::kHalf, at::kBFloat16}) {
    auto options = torch::TensorOptions().dtype(dtype).device(torch::kCUDA);
    auto fast = compile(fn, strict());
    for (int call = 0; call < kCallsPerSignature; ++call) {
      // The queries as a projection leaves them: [B, rows, heads, D] transposed.
      auto q = torch::randn({batch, group, kv_heads, dim}, options).transpose(1, 2);
      auto k = torch::randn({batch, kv_heads, slots, dim}, options);
      auto v = torch::randn({batch, kv_heads, slots, dim}, options);
      auto mask = cache_mask(100 + 37 * call, slots, options);
      auto got = fast(q, k, v, mask), want = fn(q, k, v, mask);
      ASSERT_EQ(got.sizes(), want.sizes());
      EXPECT_LE(relative_error(got.to(at::kFloat), want.to(at::kFloat)), tolerance(dtype))
          << c10::toString(dtype) << ", " << call_name(call);
    }
    const auto report = fast.report();
    EXPECT_EQ(nodes_on(report, "jit_cuda"), 1) << report.to_string();
    EXPECT_EQ(nodes_on(report, "torch_gpu"), 0) << report.to_string();
  }
}

TEST_F(JitCudaAttention, ManyTilesManyBlocksRowMasksAndStridedOperands) {
  torch::NoGradGuard no_grad;
  // 600 keys: three tiles, the last partial; 12 rows; bool masks by row.
  const std::int64_t batch = 2, heads = 3, rows = 12, keys = 600, dim = 128;
  expect_masked_attention_as_eager([&](const torch::TensorOptions& options) {
    auto q = torch::randn({batch, heads, rows, dim}, options);
    // Keys sliced out of a longer cache (rows of the head dimension apart), values transposed.
    auto k = torch::randn({batch, heads, keys + 40, dim}, options).narrow(2, 20, keys);
    auto v = torch::randn({batch, keys, heads, dim}, options).transpose(1, 2);
    auto mask = torch::rand({batch, 1, rows, keys}, options.dtype(at::kFloat)) > 0.3;
    mask.select(3, 0).fill_(true);  // every row keeps a key
    return std::array<at::Tensor, 4>{q, k, v, mask};
  });
}

// Keys whose head dimension is not adjacent (every other element) and values one element off a
// 16-byte boundary: the kernel reads them an element at a time, where aligned rows are read as
// 16-byte vectors. Two tiles of keys, an additive float mask, the decode step's grouped rows.
TEST_F(JitCudaAttention, KeysAndValuesNotInAlignedRowsAreReadAnElementAtATime) {
  torch::NoGradGuard no_grad;
  const std::int64_t batch = 1, heads = 4, rows = 8, keys = 300, dim = 64;
  expect_masked_attention_as_eager([&](const torch::TensorOptions& options) {
    auto q = torch::randn({batch, heads, rows, dim}, options);
    auto k = torch::randn({batch, heads, keys, dim, 2}, options).select(4, 0);
    const std::int64_t n = batch * heads * keys * dim;
    auto v = torch::randn({n + 1}, options).narrow(0, 1, n).view({batch, heads, keys, dim});
    auto mask = torch::randn({batch, 1, 1, keys}, options);
    return std::array<at::Tensor, 4>{q, k, v, mask};
  });
}

// A query whose every key is masked gets 0 from the kernel, as from PyTorch's math and
// memory-efficient attention (its _safe_softmax; the CPU too), not the NaN of 0 / 0. Eager's
// default here is cuDNN's attention, which gives that row the attention over every key instead
// (tests/common/cudnn_attention_off.h). The capture runs eager's own kernels and returns eager's
// value; the plan's calls are compared with eager without cuDNN's attention, their row must be 0,
// and every call's other rows are compared with eager as it runs by default.
TEST_F(JitCudaAttention, AQuerySeeingNoKeyIsZeroAsInPyTorchsMathAndEfficientKernels) {
  torch::NoGradGuard no_grad;
  auto fn = [](at::Tensor q, at::Tensor k, at::Tensor v, at::Tensor mask) {
    return at::scaled_dot_product_attention(q, k, v, mask);
  };
  auto options = torch::TensorOptions().dtype(at::kHalf).device(torch::kCUDA);
  auto fast = compile(fn, strict());
  for (int call = 0; call < kCallsPerSignature; ++call) {
    auto q = torch::randn({1, 2, 4, 64}, options);
    auto k = torch::randn({1, 2, 40, 64}, options);
    auto v = torch::randn({1, 2, 40, 64}, options);
    auto mask = torch::rand({1, 2, 4, 40}, options.dtype(at::kFloat)) > 0.5;
    mask.select(3, 0).fill_(true);
    const std::int64_t blind = 1 + call % 3;
    mask.select(2, blind).fill_(false);  // that query sees no key
    auto got = fast(q, k, v, mask).to(at::kFloat);
    auto by_default = fn(q, k, v, mask).to(at::kFloat);
    at::Tensor without_cudnn;
    {
      testing::CudnnAttentionOff cudnn_off;
      without_cudnn = fn(q, k, v, mask).to(at::kFloat);
    }
    ASSERT_FALSE(without_cudnn.isnan().any().item<bool>()) << "eager gave NaN for the row that sees no key";
    EXPECT_FALSE(got.isnan().any().item<bool>()) << call_name(call);
    const auto seeing = at::arange(4, mask.options().dtype(at::kLong)) != blind;
    const auto rows_seeing = [&](const at::Tensor& t) {
      return t.index({at::indexing::Slice(), at::indexing::Slice(), seeing});
    };
    EXPECT_LE(relative_error(rows_seeing(got), rows_seeing(by_default)), tolerance(at::kHalf)) << call_name(call);
    if (call == 0) {
      EXPECT_LE(relative_error(got, by_default), tolerance(at::kHalf)) << call_name(call);
    } else {
      EXPECT_EQ(got.select(2, blind).abs().max().item<float>(), 0.f) << call_name(call);
      EXPECT_LE(relative_error(got, without_cudnn), tolerance(at::kHalf)) << call_name(call);
    }
  }
  EXPECT_EQ(nodes_on(fast.report(), "jit_cuda"), 1) << fast.report().to_string();
}

// float32's and bfloat16's lowest finite value is what models fill additive masks with. For a query
// whose every key carries it, PyTorch's fused CUDA kernels give 0 (measured on an H100, PyTorch
// 2.11; the written-out softmax would weigh the keys evenly, which is why attention fusion leaves
// such masks written out), and so does the kernel: scaled by log2(e) the mask is -inf.
TEST_F(JitCudaAttention, AQueryWhoseKeysAllCarryTheLowestFiniteMaskIsZeroAsInPyTorchsKernels) {
  torch::NoGradGuard no_grad;
  auto fn = [](at::Tensor q, at::Tensor k, at::Tensor v, at::Tensor mask) {
    return at::scaled_dot_product_attention(q, k, v, mask);
  };
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    SCOPED_TRACE(c10::toString(dtype));
    auto options = torch::TensorOptions().dtype(dtype).device(torch::kCUDA);
    auto fast = compile(fn, strict());
    for (int call = 0; call < kCallsPerSignature; ++call) {
      auto q = torch::randn({1, 2, 3, 64}, options);
      auto k = torch::randn({1, 2, 50, 64}, options);
      auto v = torch::randn({1, 2, 50, 64}, options);
      auto hidden = torch::rand({1, 2, 3, 50}, options.dtype(at::kFloat)) < 0.4;
      hidden.select(3, 0).fill_(false);
      const std::int64_t blind = call % 3;
      hidden.select(2, blind).fill_(true);  // every key of that query carries the lowest value
      auto mask = torch::zeros({1, 2, 3, 50}, options).masked_fill(hidden, testing::lowest_finite(dtype));
      auto got = fast(q, k, v, mask).to(at::kFloat);
      EXPECT_LE(relative_error(got, fn(q, k, v, mask).to(at::kFloat)), tolerance(dtype)) << call_name(call);
      EXPECT_EQ(got.select(2, blind).abs().max().item<float>(), 0.f) << call_name(call);
    }
    EXPECT_EQ(nodes_on(fast.report(), "jit_cuda"), 1) << fast.report().to_string();
  }
}

// Attention written out with a padding mask that is data, as models write it (heads merged after
// it): the fused node (a prompt's on PyTorch's kernels, a decode step's on the kernel) and
// attention_blind_rows after it, on the kernel. From the second call on, the second sequence is
// padding throughout and one query of the first sees no key: blind rows, where eager weighs the
// keys evenly (float32, bfloat16) or by its rounded float16 sums, and the fused kernels alone
// would give 0 or the scores' softmax. The two sequences are checked apart, against eager. In
// float16 and bfloat16 also as most of transformers' decoders write it: the softmax asked for
// float32, its result cast back.
TEST_F(JitCudaAttention, WrittenOutAttentionWithADataMaskComputesItsBlindRowsAsEagerDoes) {
  torch::NoGradGuard no_grad;
  constexpr std::int64_t kBatch = 2, kHeads = 4, kKeys = 40, kDim = 64;
  auto own_dtype = [](at::Tensor q, at::Tensor k, at::Tensor v, at::Tensor mask) {
    auto context = at::matmul(at::softmax(at::matmul(q, k.transpose(-2, -1)) * 0.125 + mask, -1), v);
    return context.transpose(1, 2).reshape({q.size(0), q.size(2), kHeads * kDim});
  };
  auto float32_softmax = [](at::Tensor q, at::Tensor k, at::Tensor v, at::Tensor mask) {
    auto scores = at::matmul(q, k.transpose(-2, -1)) * 0.125 + mask;
    auto context = at::matmul(at::softmax(scores, -1, at::kFloat).to(q.scalar_type()), v);
    return context.transpose(1, 2).reshape({q.size(0), q.size(2), kHeads * kDim});
  };
  const std::pair<c10::ScalarType, bool> forms[] = {
      {at::kFloat, false}, {at::kHalf, false}, {at::kBFloat16, false}, {at::kHalf, true}, {at::kBFloat16, true}};
  for (const auto& [dtype, wide_softmax] : forms) {
    const std::function<at::Tensor(at::Tensor, at::Tensor, at::Tensor, at::Tensor)> fn =
        wide_softmax ? std::function<at::Tensor(at::Tensor, at::Tensor, at::Tensor, at::Tensor)>(float32_softmax)
                     : own_dtype;
    // One and eight rows a head: a decode step's, the blind rows computed in the attention's own
    // kernel (one group); 32: a prompt's, the attention on PyTorch's kernels.
    for (std::int64_t rows : {1, 8, 32}) {
      // With the JIT backend, and without it: PyTorch's backend then runs the op's definition.
      for (bool jit : {true, false}) {
        SCOPED_TRACE(::testing::Message() << c10::toString(dtype) << (wide_softmax ? ", the softmax in float32" : "")
                                          << ", " << rows << " query rows" << (jit ? "" : ", without the JIT backend"));
        auto options = torch::TensorOptions().dtype(dtype).device(torch::kCUDA);
        auto compile_options = strict();
        if (!jit) compile_options.backends = {"torch_gpu", "cpu"};
        auto fast = compile(fn, compile_options);
        for (int call = 0; call < kCallsPerSignature; ++call) {
          auto q = torch::randn({kBatch, kHeads, rows, kDim}, options);
          auto k = torch::randn({kBatch, kHeads, kKeys, kDim}, options);
          auto v = torch::randn({kBatch, kHeads, kKeys, kDim}, options);
          // A padding mask per query row; from the second call on, the second sequence wholly
          // hidden and one query of the first (a blind row among rows that see keys).
          auto hidden = torch::rand({kBatch, 1, rows, kKeys}, options.dtype(at::kFloat)) < 0.4;
          hidden.select(3, 0).fill_(false);
          if (call > 0) {
            hidden.select(0, 1).fill_(true);
            hidden.select(0, 0).select(1, call % rows).fill_(true);
          }
          const double lowest = testing::lowest_finite(dtype);
          auto mask = torch::zeros({kBatch, 1, rows, kKeys}, options).masked_fill(hidden, lowest);
          auto got = fast(q, k, v, mask).to(at::kFloat);
          auto want = fn(q, k, v, mask).to(at::kFloat);
          EXPECT_FALSE(got.isnan().any().item<bool>()) << call_name(call);
          EXPECT_LE(relative_error(got.select(0, 0), want.select(0, 0)), tolerance(dtype)) << call_name(call);
          EXPECT_LE(relative_error(got.select(0, 1), want.select(0, 1)), tolerance(dtype))
              << call_name(call) << (call > 0 ? ", the blind sequence" : "");
        }
        const auto report = fast.report();
        EXPECT_EQ(testing::pass_counter(report, "fuse_attention", "blind_rows_checked"), 1) << report.to_string();
        // The blind rows on the kernel; a decode step's fused node too.
        EXPECT_EQ(nodes_on(report, "jit_cuda"), jit ? (rows <= 16 ? 2 : 1) : 0) << report.to_string();
        EXPECT_EQ(fast.stats().eager_calls, 0);
      }
    }
  }
}

TEST_F(JitCudaAttention, NoMaskAndAnExplicitScale) {
  torch::NoGradGuard no_grad;
  auto fn = [](at::Tensor q, at::Tensor k, at::Tensor v) {
    return at::scaled_dot_product_attention(q, k, v, {}, 0.0, false, 0.3);
  };
  auto options = torch::TensorOptions().dtype(at::kHalf).device(torch::kCUDA);
  // 77 keys: two warps' worth and a part of a third, the other warps of the block without a key;
  // 5 keys: fewer than one warp's lanes.
  for (std::int64_t keys : {77, 5}) {
    auto fast = compile(fn, strict());
    for (int call = 0; call < kCallsPerSignature; ++call) {
      auto q = torch::randn({3, 5, 1, 64}, options);
      auto k = torch::randn({3, 5, keys, 64}, options);
      auto v = torch::randn({3, 5, keys, 64}, options);
      EXPECT_LE(relative_error(fast(q, k, v).to(at::kFloat), fn(q, k, v).to(at::kFloat)), tolerance(at::kHalf))
          << keys << " keys, " << call_name(call);
    }
    EXPECT_EQ(nodes_on(fast.report(), "jit_cuda"), 1) << fast.report().to_string();
  }
}

TEST_F(JitCudaAttention, APromptsQueriesStayOnPyTorchsKernels) {
  torch::NoGradGuard no_grad;
  auto fn = [](at::Tensor q, at::Tensor k, at::Tensor v) { return at::scaled_dot_product_attention(q, k, v); };
  auto options = torch::TensorOptions().dtype(at::kHalf).device(torch::kCUDA);
  auto fast = compile(fn, strict());
  for (int call = 0; call < kCallsPerSignature; ++call) {
    auto q = torch::randn({1, 4, 128, 64}, options);
    auto k = torch::randn({1, 4, 128, 64}, options);
    auto v = torch::randn({1, 4, 128, 64}, options);
    EXPECT_LE(relative_error(fast(q, k, v).to(at::kFloat), fn(q, k, v).to(at::kFloat)), tolerance(at::kHalf))
        << call_name(call);
  }
  EXPECT_EQ(nodes_on(fast.report(), "torch_gpu"), 1) << fast.report().to_string();
}

}  // namespace
}  // namespace zenith
