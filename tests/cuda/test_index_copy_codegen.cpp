// The index-copy code generator (backends/cuda/index_copy_codegen.h), without a GPU: index_copy_
// compiles cleanly with NVRTC for sm_90 for every element size and dim; keys follow the element
// size, rank, dim and offset width, never the sizes or the dtype's kind; launch arguments follow
// the documented layout; and what it cannot run says why. Results are checked against eager on the
// GPU (tests/gpu/test_jit_cuda_index_copy.cpp).
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "backends/cuda/kernel_codegen.h"
#include "cuda/codegen_test_support.h"
#include "unit/graph_builders.h"

namespace zenith::cuda {
namespace {

using testing::GraphBuilder;
using testing::scalar;
using testing::value;

// cache.index_copy_(dim, index, source) as a plan's group: the cache [4, 4, 16, 8] written, an
// index of `count` entries (in 0..3), the source with `count` entries along dim, in `dtype` on
// CUDA; the group returns the cache it writes.
ir::Graph index_copy(std::int64_t dim, std::int64_t count, c10::ScalarType dtype) {
  std::vector<std::int64_t> sizes = {4, 4, 16, 8};
  auto source_sizes = sizes;
  source_sizes[static_cast<std::size_t>(dim < 0 ? dim + 4 : dim)] = count;
  GraphBuilder b;
  int cache = b.input(sizes);
  int index = b.input({count}, at::kLong);
  int source = b.input(source_sizes);
  int out = b.op("aten::index_copy_", "", {value("self", cache), scalar("dim", dim), value("index", index), value("source", source)});
  auto graph = codegen_test::on_cuda(b.finish({out}));
  graph.output_aliases = {0};
  for (int id : {cache, source, out}) graph.value(id).type.dtype = dtype;
  return graph;
}

IndexCopyKernel generate_or_fail(const ir::Graph& graph) { return codegen_test::generated_kernel<IndexCopyKernel>(graph); }

TEST(IndexCopyCodegen, CompilesForEveryElementSizeAndDim) {
  for (auto dtype : {at::kFloat, at::kHalf, at::kBool, at::kLong}) {
    for (std::int64_t dim : {0, 1, 2, -1}) {
      SCOPED_TRACE(::testing::Message() << c10::toString(dtype) << " dim " << dim);
      auto kernel = generate_or_fail(index_copy(dim, 1, dtype));
      EXPECT_EQ(kernel.name.rfind("zenith_index_copy_", 0), 0u) << kernel.name;
      EXPECT_EQ(kernel.dim, dim < 0 ? 3 : dim);
      EXPECT_EQ(kernel.rank, 4);
      EXPECT_FALSE(kernel.index64);
      EXPECT_EQ(kernel.operands.size(), 4u) << "the cache, the index, the source, then the cache as the result";
      codegen_test::expect_compiles(kernel.source, kernel.name);
    }
  }
}

TEST(IndexCopyCodegen, KeysFollowElementSizeAndDimNotSizesOrKind) {
  const auto one = generate_or_fail(index_copy(2, 1, at::kHalf));
  EXPECT_EQ(one.key, generate_or_fail(index_copy(2, 3, at::kHalf)).key) << "a prompt's positions and a token's";
  EXPECT_EQ(one.key, generate_or_fail(index_copy(2, 1, at::kBFloat16)).key) << "copied as 2-byte elements either way";
  EXPECT_NE(one.key, generate_or_fail(index_copy(1, 1, at::kHalf)).key);
  EXPECT_NE(one.key, generate_or_fail(index_copy(2, 1, at::kFloat)).key);
}

TEST(IndexCopyCodegen, ArgumentsFollowTheDocumentedLayout) {
  auto kernel = generate_or_fail(index_copy(2, 3, at::kFloat));
  auto cache = at::zeros({3, 2, 4, 16, 8}).select(0, 1);  // a layer of a stacked cache
  auto index = at::arange(6, at::kLong).slice(0, 0, 6, 2);   // stride 2
  auto source = at::zeros({2, 4, 8, 3}).transpose(2, 3);     // [2, 4, 3, 8], not contiguous
  const DLTensor c = codegen_test::view(cache), i = codegen_test::view(index), s = codegen_test::view(source);
  const auto words = pack_index_copy_arguments(kernel, {&c, &i, &s, &c});
  ASSERT_EQ(words.size(), 5u + 4 + 4 + 1 + 4);
  EXPECT_EQ(words[0], 2 * 4 * 3 * 8) << "the source's elements";
  EXPECT_EQ(words[1], 16) << "the cache's size along dim";
  EXPECT_EQ(words[2], reinterpret_cast<std::int64_t>(index.data_ptr()));
  EXPECT_EQ(words[3], 2) << "the index's stride";
  EXPECT_EQ(words[4], reinterpret_cast<std::int64_t>(source.data_ptr()));
  EXPECT_EQ(std::vector<std::int64_t>(words.begin() + 5, words.begin() + 9), (std::vector<std::int64_t>{2, 4, 3, 8}));
  EXPECT_EQ(std::vector<std::int64_t>(words.begin() + 9, words.begin() + 13), source.strides().vec());
  EXPECT_EQ(words[13], reinterpret_cast<std::int64_t>(cache.data_ptr()));
  EXPECT_EQ(std::vector<std::int64_t>(words.begin() + 14, words.end()), cache.strides().vec());
}

TEST(IndexCopyCodegen, WhatItCannotRunSaysWhy) {
  auto int_index = index_copy(2, 1, at::kHalf);
  int_index.value(int_index.inputs[1]).type.dtype = at::kInt;
  EXPECT_NE(codegen_test::refusal(int_index).find("int64 of at most one dimension"), std::string::npos)
      << codegen_test::refusal(int_index);

  auto expanded = index_copy(2, 1, at::kHalf);
  expanded.value(expanded.inputs[0]).type.strides[0] = 0;
  EXPECT_NE(codegen_test::refusal(expanded).find("share memory"), std::string::npos) << codegen_test::refusal(expanded);

  auto mixed = index_copy(2, 1, at::kHalf);
  mixed.value(mixed.inputs[2]).type.dtype = at::kFloat;
  EXPECT_NE(codegen_test::refusal(mixed).find("index_copy_ of"), std::string::npos) << codegen_test::refusal(mixed);

  auto not_aliased = index_copy(2, 1, at::kHalf);
  not_aliased.output_aliases = {-1};
  EXPECT_NE(codegen_test::refusal(not_aliased).find("returns something else"), std::string::npos)
      << codegen_test::refusal(not_aliased);

  auto short_index = index_copy(2, 3, at::kHalf);
  short_index.value(short_index.inputs[1]).type.sizes = {2};
  EXPECT_NE(codegen_test::refusal(short_index).find("2 indices for 3 source entries"), std::string::npos)
      << codegen_test::refusal(short_index);
}

}  // namespace
}  // namespace zenith::cuda
