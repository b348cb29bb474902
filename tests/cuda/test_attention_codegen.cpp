// The attention code generator, without a GPU: a decode step's attention (grouped-query, masked
// additively or by bool, or not at all, in float32, float16 and bfloat16) compiles cleanly with
// NVRTC for sm_90, keys follow the dtype, mask and head dimension (never the sizes), arguments
// follow the documented layout, and attention it cannot run (a prompt's many queries, dropout,
// causal, a head dimension it has no slices for) says why. Numerics are checked against eager on
// the GPU (tests/gpu/test_jit_cuda_attention.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include <ATen/ATen.h>

#include "backends/cuda/kernel_codegen.h"
#include "cuda/codegen_test_support.h"
#include "unit/graph_builders.h"

namespace zenith::cuda {
namespace {

using testing::GraphBuilder;
using testing::none;
using testing::real;
using testing::value;

struct Shape {
  std::int64_t batch = 1, heads = 4, rows = 8, keys = 256, dim = 64;
};

enum class Mask { None, Additive, Bool };

// One scaled_dot_product_attention over query [B, H, R, D], key and value [B, H, S, D] and a mask
// [R, S] (a decode step's, broadcast over batch and heads), built in float32 (CPU attention) and
// then typed as `dtype` on CUDA, as a plan's group would be.
ir::Graph attention(const Shape& s, c10::ScalarType dtype, Mask mask_kind, double dropout = 0.0, bool causal = false) {
  GraphBuilder b;
  int q = b.input({s.batch, s.heads, s.rows, s.dim});
  int k = b.input({s.batch, s.heads, s.keys, s.dim});
  int v = b.input({s.batch, s.heads, s.keys, s.dim});
  ir::Argument mask = none("attn_mask");
  if (mask_kind != Mask::None) {
    mask = value("attn_mask", b.input({s.rows, s.keys}, mask_kind == Mask::Bool ? at::kBool : at::kFloat));
  }
  int out = b.op("aten::scaled_dot_product_attention", "",
                 {value("query", q), value("key", k), value("value", v), mask, real("dropout_p", dropout),
                  {"is_causal", causal}, none("scale"), {"enable_gqa", false}});
  auto graph = codegen_test::on_cuda(b.finish({out}));
  for (auto& slot : graph.values) {
    if (slot && slot->type.dtype == at::kFloat) slot->type.dtype = dtype;
  }
  return graph;
}

AttentionKernel generate_or_fail(const ir::Graph& graph) {
  return codegen_test::generated_kernel<AttentionKernel>(graph);
}

using codegen_test::refusal;

TEST(AttentionCodegen, DecodeAttentionCompilesForEveryDtypeMaskAndHeadDimension) {
  for (auto dtype : {at::kFloat, at::kHalf, at::kBFloat16}) {
    for (auto mask : {Mask::None, Mask::Additive, Mask::Bool}) {
      for (std::int64_t dim : {64, 128}) {
        SCOPED_TRACE(::testing::Message() << c10::toString(dtype) << ", mask " << static_cast<int>(mask) << ", D " << dim);
        Shape shape;
        shape.dim = dim;
        auto kernel = generate_or_fail(attention(shape, dtype, mask));
        EXPECT_EQ(kernel.name.rfind("zenith_attn_", 0), 0u) << kernel.name;
        EXPECT_DOUBLE_EQ(kernel.scale, 1.0 / std::sqrt(static_cast<double>(dim)));
        EXPECT_EQ(kernel.mask, mask == Mask::None ? -1 : 3);
        codegen_test::expect_compiles(kernel.source, kernel.name);
      }
    }
  }
}

TEST(AttentionCodegen, KeysFollowDtypeMaskAndHeadDimensionNotSizes) {
  Shape decode, longer;
  longer.batch = 3;
  longer.heads = 2;
  longer.rows = 13;
  longer.keys = 1000;
  const auto a = generate_or_fail(attention(decode, at::kHalf, Mask::Additive));
  EXPECT_EQ(a.key, generate_or_fail(attention(longer, at::kHalf, Mask::Additive)).key);
  EXPECT_NE(a.key, generate_or_fail(attention(decode, at::kBFloat16, Mask::Additive)).key);
  EXPECT_NE(a.key, generate_or_fail(attention(decode, at::kHalf, Mask::Bool)).key);
  EXPECT_NE(a.key, generate_or_fail(attention(decode, at::kHalf, Mask::None)).key);
  Shape wide;
  wide.dim = 128;
  EXPECT_NE(a.key, generate_or_fail(attention(wide, at::kHalf, Mask::Additive)).key);
}

TEST(AttentionCodegen, ArgumentsFollowTheDocumentedLayout) {
  Shape s;
  s.batch = 2;
  s.heads = 3;
  s.rows = 12;
  s.keys = 5;
  s.dim = 8;
  const auto kernel = generate_or_fail(attention(s, at::kFloat, Mask::Additive));
  // The query transposed from [B, R, H, D] as a projection leaves it; the mask [R, S].
  auto q = at::zeros({s.batch, s.rows, s.heads, s.dim}).transpose(1, 2);
  auto k = at::zeros({s.batch, s.heads, s.keys, s.dim});
  auto v = at::zeros({s.batch, s.heads, s.keys, s.dim});
  auto mask = at::zeros({s.rows, s.keys});
  auto out = at::zeros({s.batch, s.heads, s.rows, s.dim});
  std::vector<DLTensor> views{codegen_test::view(q), codegen_test::view(k), codegen_test::view(v),
                              codegen_test::view(mask), codegen_test::view(out)};
  std::vector<const DLTensor*> operands;
  for (const auto& view : views) operands.push_back(&view);
  const auto words = pack_attention_arguments(kernel, operands);
  ASSERT_EQ(words.size(), 6u + 5 * 5);
  const std::int64_t chunks = (s.rows + kAttentionRowsPerBlock - 1) / kAttentionRowsPerBlock;
  EXPECT_EQ(std::vector<std::int64_t>(words.begin(), words.begin() + 5),
            (std::vector<std::int64_t>{s.batch, s.heads, s.rows, s.keys, chunks}));
  double scale = 0;
  std::memcpy(&scale, &words[5], sizeof scale);
  EXPECT_DOUBLE_EQ(scale, 1.0 / std::sqrt(8.0));
  auto strides_of = [&](std::size_t operand) {
    return std::vector<std::int64_t>(words.begin() + 6 + 5 * operand + 1, words.begin() + 6 + 5 * operand + 5);
  };
  EXPECT_EQ(words[6], static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(q.data_ptr())));
  EXPECT_EQ(strides_of(0), (std::vector<std::int64_t>{s.rows * s.heads * s.dim, s.dim, s.heads * s.dim, 1}));
  EXPECT_EQ(strides_of(3), (std::vector<std::int64_t>{0, 0, s.keys, 1})) << "the mask broadcasts over batch and heads";
  EXPECT_EQ(strides_of(4), (std::vector<std::int64_t>{s.heads * s.rows * s.dim, s.rows * s.dim, s.dim, 1}));
  EXPECT_EQ(attention_blocks(words), s.batch * s.heads * chunks);

  // Without a mask its five words are zero.
  const auto unmasked = generate_or_fail(attention(s, at::kFloat, Mask::None));
  std::vector<const DLTensor*> four{&views[0], &views[1], &views[2], &views[4]};
  const auto plain = pack_attention_arguments(unmasked, four);
  EXPECT_EQ(std::vector<std::int64_t>(plain.begin() + 21, plain.begin() + 26), std::vector<std::int64_t>(5, 0));
}

TEST(AttentionCodegen, AttentionItCannotRunSaysWhy) {
  Shape prompt;
  prompt.rows = 128;
  EXPECT_NE(refusal(attention(prompt, at::kHalf, Mask::Additive)).find("query rows per head"), std::string::npos);
  EXPECT_NE(refusal(attention(Shape{}, at::kHalf, Mask::None, 0.1)).find("dropout"), std::string::npos);
  EXPECT_NE(refusal(attention(Shape{}, at::kHalf, Mask::None, 0.0, true)).find("causal"), std::string::npos);
  Shape wide;
  wide.dim = 256;
  EXPECT_NE(refusal(attention(wide, at::kHalf, Mask::None)).find("head dimension 256"), std::string::npos);
  Shape odd;
  odd.dim = 48;  // six 16-byte slices of float16: not a power of two
  EXPECT_NE(refusal(attention(odd, at::kHalf, Mask::None)).find("head dimension 48"), std::string::npos);
}

}  // namespace
}  // namespace zenith::cuda
