// The attention code generators, without a GPU: a decode step's attention (grouped-query, masked
// additively or by bool, or not at all, in float32, float16 and bfloat16) compiles cleanly with
// NVRTC for sm_90, keys follow the dtype, mask and head dimension (never the sizes), arguments
// follow the documented layout, and attention it cannot run (a prompt's many queries, dropout,
// causal, a head dimension it has no slices for) says why; so does attention_blind_rows' kernel
// in every dtype, its arguments laid out as documented; a decode step's attention grouped with its
// blind rows is one kernel that computes both. Numerics are checked against eager on the
// GPU (tests/gpu/test_jit_cuda_attention.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <optional>

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

// attention_blind_rows over a fused result [B, H, R, D] laid out as the fused kernels give it
// ([B, R, H, D] memory), q, k, v as attention's and a padding mask [B, 1, 1, S], built in float32
// and typed as `dtype` on CUDA; `mask_dtype` the mask's (default: dtype).
ir::Graph blind_rows(const Shape& s, c10::ScalarType dtype, std::optional<c10::ScalarType> mask_dtype = std::nullopt) {
  GraphBuilder b;
  int a = b.input({s.batch, s.rows, s.heads, s.dim});
  int fused = b.op("aten::transpose", "int", {value("self", a), {"dim0", std::int64_t{1}}, {"dim1", std::int64_t{2}}});
  int q = b.input({s.batch, s.heads, s.rows, s.dim});
  int k = b.input({s.batch, s.heads, s.keys, s.dim});
  int v = b.input({s.batch, s.heads, s.keys, s.dim});
  int mask = b.input({s.batch, 1, 1, s.keys});
  int out = b.op("zenith::attention_blind_rows", "",
                 {value("attention", fused), value("query", q), value("key", k), value("value", v),
                  value("attn_mask", mask), real("scale", 0.125)});
  auto graph = b.finish({out});
  // The group as the plan cuts it: the transposed result is an input.
  graph.nodes.erase(graph.nodes.begin());
  graph.inputs.erase(graph.inputs.begin());
  graph.inputs.insert(graph.inputs.begin(), fused);
  graph.value(fused).role = ir::ValueRole::Input;
  graph = codegen_test::on_cuda(graph);
  for (auto& slot : graph.values) {
    if (slot && slot->type.dtype == at::kFloat) slot->type.dtype = dtype;
  }
  if (mask_dtype) graph.value(mask).type.dtype = *mask_dtype;
  return graph;
}

TEST(BlindRowsCodegen, CompilesForEveryDtypeWithKeysOfDtypeAndHeadDimensionOnly) {
  for (auto dtype : {at::kFloat, at::kHalf, at::kBFloat16}) {
    for (std::int64_t dim : {64, 80}) {
      SCOPED_TRACE(::testing::Message() << c10::toString(dtype) << ", D " << dim);
      Shape shape;
      shape.dim = dim;
      const auto kernel = codegen_test::generated_kernel<BlindRowsKernel>(blind_rows(shape, dtype));
      EXPECT_EQ(kernel.name.rfind("zenith_blind_", 0), 0u) << kernel.name;
      EXPECT_DOUBLE_EQ(kernel.scale, 0.125);
      EXPECT_EQ(std::vector<int>({kernel.attention, kernel.query, kernel.key_input, kernel.value, kernel.mask}),
                std::vector<int>({0, 1, 2, 3, 4}));
      // 16-bit logits are rounded to the dtype where eager holds them; float32's are not.
      EXPECT_EQ(kernel.source.find("#define ROUND(x) zn_round_") == std::string::npos, dtype == at::kFloat);
      codegen_test::expect_compiles(kernel.source, kernel.name);
      Shape longer = shape;
      longer.batch = 3;
      longer.rows = 100;
      longer.keys = 777;
      EXPECT_EQ(kernel.key, codegen_test::generated_kernel<BlindRowsKernel>(blind_rows(longer, dtype)).key);
    }
  }
  const auto words_of = [](const Shape& s) {
    const auto kernel = codegen_test::generated_kernel<BlindRowsKernel>(blind_rows(s, at::kFloat));
    auto a = at::zeros({s.batch, s.rows, s.heads, s.dim}).transpose(1, 2);
    auto q = at::zeros({s.batch, s.heads, s.rows, s.dim});
    auto k = at::zeros({s.batch, s.heads, s.keys, s.dim});
    auto mask = at::zeros({s.batch, 1, 1, s.keys});
    std::vector<DLTensor> views{codegen_test::view(a), codegen_test::view(q), codegen_test::view(k),
                                codegen_test::view(k), codegen_test::view(mask), codegen_test::view(a)};
    std::vector<const DLTensor*> operands;
    for (const auto& view : views) operands.push_back(&view);
    return pack_blind_rows_arguments(kernel, operands);
  };
  Shape s;
  s.batch = 2;
  s.heads = 3;
  s.rows = 5;
  s.keys = 7;
  s.dim = 8;
  const auto words = words_of(s);
  ASSERT_EQ(words.size(), 5u + 6 * 5);
  EXPECT_EQ(std::vector<std::int64_t>(words.begin(), words.begin() + 4),
            (std::vector<std::int64_t>{s.batch, s.heads, s.rows, s.keys}));
  // The fused result's [B, R, H, D] memory; the mask broadcast over heads and rows.
  EXPECT_EQ(std::vector<std::int64_t>(words.begin() + 6, words.begin() + 10),
            (std::vector<std::int64_t>{s.rows * s.heads * s.dim, s.dim, s.heads * s.dim, 1}));
  EXPECT_EQ(std::vector<std::int64_t>(words.begin() + 26, words.begin() + 30),
            (std::vector<std::int64_t>{s.keys, 0, 0, 1}));
  EXPECT_EQ(blind_rows_blocks(words), (s.batch * s.heads * s.rows + 7) / 8) << "a warp per row, eight a block";
}

// A decode step's attention and the attention_blind_rows node after it, as the fusion pass groups
// them: query [B, H, R, D], key and value [B, H, S, D], an additive mask [R, S] of `mask_dtype`
// (default: dtype), the attention's scale 0.125 and the blind rows' `blind_scale`; with
// `attention_read_outside`, the attention's own result is returned too.
struct BlindGroupForm {
  std::optional<c10::ScalarType> mask_dtype;
  double blind_scale = 0.125;
  bool attention_read_outside = false;
};

ir::Graph attention_with_blind_rows(const Shape& s, c10::ScalarType dtype, const BlindGroupForm& form = {}) {
  GraphBuilder b;
  int q = b.input({s.batch, s.heads, s.rows, s.dim});
  int k = b.input({s.batch, s.heads, s.keys, s.dim});
  int v = b.input({s.batch, s.heads, s.keys, s.dim});
  int mask = b.input({s.rows, s.keys});
  int fused = b.op("aten::scaled_dot_product_attention", "",
                   {value("query", q), value("key", k), value("value", v), value("attn_mask", mask),
                    real("dropout_p", 0.0), {"is_causal", false}, real("scale", 0.125), {"enable_gqa", false}});
  int out = b.op("zenith::attention_blind_rows", "",
                 {value("attention", fused), value("query", q), value("key", k), value("value", v),
                  value("attn_mask", mask), real("scale", form.blind_scale)});
  auto graph = codegen_test::on_cuda(b.finish(form.attention_read_outside ? std::vector<int>{out, fused}
                                                                         : std::vector<int>{out}));
  for (auto& slot : graph.values) {
    if (slot && slot->type.dtype == at::kFloat) slot->type.dtype = dtype;
  }
  if (form.mask_dtype) graph.value(mask).type.dtype = *form.mask_dtype;
  return graph;
}

TEST(AttentionCodegen, ADecodeStepsBlindRowsAreComputedInTheAttentionKernel) {
  for (auto dtype : {at::kFloat, at::kHalf, at::kBFloat16}) {
    for (std::int64_t dim : {64, 128}) {
      SCOPED_TRACE(::testing::Message() << c10::toString(dtype) << ", D " << dim);
      Shape shape;
      shape.dim = dim;
      const auto graph = attention_with_blind_rows(shape, dtype);
      const auto kernel = generate_or_fail(graph);
      EXPECT_EQ(kernel.name.rfind("zenith_attn_", 0), 0u) << kernel.name;
      EXPECT_EQ(std::vector<int>({kernel.query, kernel.key_input, kernel.value, kernel.mask}),
                std::vector<int>({0, 1, 2, 3}));
      EXPECT_EQ(kernel.operands.back(), graph.outputs.front()) << "the kernel writes the blind rows' result";
      EXPECT_DOUBLE_EQ(kernel.scale, 0.125);
      EXPECT_NE(kernel.source.find("#define BLIND 1"), std::string::npos);
      EXPECT_NE(kernel.source.find("zn_blind_row("), std::string::npos);
      // Keys: the blind rows are part of what the kernel computes, the sizes are not.
      const auto plain = generate_or_fail(attention(shape, dtype, Mask::Additive));
      EXPECT_NE(plain.source.find("#define BLIND 0"), std::string::npos);
      EXPECT_NE(kernel.key, plain.key);
      Shape longer = shape;
      longer.batch = 2;
      longer.rows = 16;
      longer.keys = 1000;
      EXPECT_EQ(kernel.key, generate_or_fail(attention_with_blind_rows(longer, dtype)).key);
      codegen_test::expect_compiles(kernel.source, kernel.name);
    }
  }
}

TEST(AttentionCodegen, BlindRowsTheKernelCannotComputeSayWhy) {
  BlindGroupForm wide_mask;
  wide_mask.mask_dtype = at::kFloat;
  EXPECT_NE(refusal(attention_with_blind_rows(Shape{}, at::kHalf, wide_mask)).find("one dtype expected"),
            std::string::npos);
  BlindGroupForm rescaled;
  rescaled.blind_scale = 0.25;
  EXPECT_NE(refusal(attention_with_blind_rows(Shape{}, at::kHalf, rescaled)).find("scaled otherwise"),
            std::string::npos);
  BlindGroupForm read_outside;
  read_outside.attention_read_outside = true;
  EXPECT_NE(refusal(attention_with_blind_rows(Shape{}, at::kHalf, read_outside)).find("read outside its group"),
            std::string::npos);
}

TEST(BlindRowsCodegen, OperandsItCannotRunSayWhy) {
  EXPECT_NE(refusal(blind_rows(Shape{}, at::kHalf, at::kFloat)).find("one dtype expected"), std::string::npos);
  Shape wide;
  wide.dim = 512;
  EXPECT_NE(refusal(blind_rows(wide, at::kHalf)).find("value head dimension of 512"), std::string::npos);
}

}  // namespace
}  // namespace zenith::cuda
