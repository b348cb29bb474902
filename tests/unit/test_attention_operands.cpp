// core/attention_operand_alignment.h without a device: the copy keeps a tensor's layout (views that
// start inside their storage, an expanded mask, padded rows, a transpose), which ops are guarded,
// and the operands the guard leaves alone (the CPU's, undefined ones, values that are not tensors).
// The CUDA side, with ATen's attention kernels: tests/gpu/test_attention_operand_alignment.cpp.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/jit/frontend/function_schema_parser.h>

#include "core/attention_operand_alignment.h"

namespace zenith {
namespace {

// The same values under the same sizes and strides, in storage of its own that starts at the first
// element and holds no element the original's span does not.
void expect_copied_with_layout(const at::Tensor& copy, const at::Tensor& original, std::int64_t span) {
  EXPECT_EQ(copy.sizes(), original.sizes());
  EXPECT_EQ(copy.strides(), original.strides());
  EXPECT_EQ(copy.storage_offset(), 0);
  EXPECT_EQ(copy.storage().nbytes(), static_cast<std::size_t>(span) * copy.element_size());
  EXPECT_FALSE(copy.is_alias_of(original));
  EXPECT_TRUE(at::equal(copy, original));
}

TEST(AttentionOperands, ACopyKeepsTheLayout) {
  at::manual_seed(41);
  const auto storage = at::randn({2 * 3 * 4 * 9 + 1}, at::kFloat);
  // Rows of 8 read out of rows of 9 (padding), one element into the storage.
  const auto padded = storage.narrow(0, 1, 2 * 3 * 4 * 9).view({2, 3, 4, 9}).narrow(-1, 0, 8);
  expect_copied_with_layout(copy_keeping_layout(padded), padded, ((2 * 3 * 4) - 1) * 9 + 8);
  // A mask row expanded over heads and query rows: still one row once copied.
  const auto row = storage.narrow(0, 3, 16).view({1, 1, 1, 16});
  const auto expanded = row.expand({2, 3, 16, 16});
  expect_copied_with_layout(copy_keeping_layout(expanded), expanded, 16);
  // Keys transposed for the product: the transpose stays a transpose.
  const auto keys = storage.narrow(0, 5, 4 * 8).view({4, 8});
  expect_copied_with_layout(copy_keeping_layout(keys.t()), keys.t(), 4 * 8);
  // A copy that is written does not write the original.
  auto copy = copy_keeping_layout(padded);
  const auto before = padded.clone();
  copy.fill_(0);
  EXPECT_TRUE(at::equal(padded, before));
}

const c10::FunctionSchema& schema_of(const char* op) {
  const auto handle = c10::Dispatcher::singleton().findSchema({op, ""});
  if (!handle) throw std::runtime_error(std::string("no ATen operator ") + op);
  return handle->schema();
}

TEST(AttentionOperands, TheFusedAttentionOpsAreGuardedAndTheMathBackendIsNot) {
  for (const char* op : {"aten::scaled_dot_product_attention", "aten::_scaled_dot_product_cudnn_attention",
                         "aten::_scaled_dot_product_cudnn_attention_backward", "aten::_scaled_dot_product_efficient_attention",
                         "aten::_scaled_dot_product_efficient_attention_backward",
                         "aten::_scaled_dot_product_flash_attention",
                         "aten::_scaled_dot_product_flash_attention_backward"}) {
    EXPECT_TRUE(reads_attention_operands_aligned(schema_of(op))) << op;
  }
  for (const char* op : {"aten::_scaled_dot_product_attention_math", "aten::matmul", "aten::_softmax"}) {
    EXPECT_FALSE(reads_attention_operands_aligned(schema_of(op))) << op;
  }
}

// An overload that writes an argument (an out= form) is not guarded: a copy put in that argument's
// place would take the write, and the caller's tensor would never see it.
TEST(AttentionOperands, AnOverloadThatWritesAnArgumentIsNotGuarded) {
  const auto out_form = torch::jit::parseSchema(
      "aten::scaled_dot_product_attention.out(Tensor query, Tensor key, Tensor value, *, Tensor(a!) out) -> Tensor(a!)");
  EXPECT_FALSE(reads_attention_operands_aligned(out_form));
  const auto plain = torch::jit::parseSchema("aten::scaled_dot_product_attention(Tensor query, Tensor key, Tensor value) -> Tensor");
  EXPECT_TRUE(reads_attention_operands_aligned(plain));
}

// The CPU's kernels read any address: its operands, however placed, are not copied.
TEST(AttentionOperands, OperandsOffTheDeviceStayAsTheyAre) {
  const auto off = at::randn({65}, at::kFloat).narrow(0, 1, 64);
  ASSERT_NE(reinterpret_cast<std::uintptr_t>(off.const_data_ptr()) % 16, 0u);
  torch::jit::Stack stack = {off, c10::IValue(0.5), at::Tensor(), c10::IValue(), c10::IValue(true)};
  const auto copies_before = attention_operands_aligned();
  EXPECT_EQ(align_attention_operands(stack), 0u);
  EXPECT_EQ(attention_operands_aligned(), copies_before);
  EXPECT_EQ(stack[0].toTensor().const_data_ptr(), off.const_data_ptr());
  EXPECT_FALSE(stack[2].toTensor().defined());
  EXPECT_TRUE(stack[3].isNone());
}

}  // namespace
}  // namespace zenith
