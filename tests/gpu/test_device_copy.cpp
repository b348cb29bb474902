// runtime/device_copy.h: a graph's copies in and out take one memcpy only where the two tensors
// hold the same bytes for the same values, and give ATen's result everywhere. Label gpu.
#include <ATen/cuda/Sleep.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "runtime/device_copy.h"

namespace {

using zenith::copy_into;
using zenith::copy_of;
using zenith::same_dense_layout;

const torch::Device kDevice(torch::kCUDA);

class DeviceCopy : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
    torch::manual_seed(5);
  }
};

// Copies are exact: every comparison below is equality.
void expect_equal_values(const at::Tensor& actual, const at::Tensor& expected) {
  ASSERT_EQ(actual.sizes(), expected.sizes());
  ASSERT_EQ(actual.scalar_type(), expected.scalar_type());
  EXPECT_TRUE(torch::equal(actual.cpu(), expected.cpu()));
}

// Sources of every layout a graph's input or output can have, and whether one memcpy may serve a
// destination of the same sizes and strides.
struct Case {
  const char* what;
  at::Tensor source;
  bool memcpy;
};

std::vector<Case> cases() {
  auto f = torch::TensorOptions().device(kDevice);
  std::vector<Case> all;
  all.push_back({"contiguous float32", torch::randn({3, 5, 7}, f), true});
  all.push_back({"channels-last float16",
                 torch::randn({2, 6, 4, 4}, f.dtype(torch::kHalf)).contiguous(at::MemoryFormat::ChannelsLast), true});
  all.push_back({"transposed int64 (dense, permuted strides)", torch::randint(1000, {9, 4}, f.dtype(torch::kLong)).t(), true});
  all.push_back({"bool", torch::rand({17}, f) > 0.5, true});
  all.push_back({"rows 1 to 3 of a matrix (a storage offset)", torch::randn({6, 5}, f).narrow(0, 1, 3), true});
  all.push_back({"an expanded row (elements share memory)", torch::randn({1, 8}, f).expand({5, 8}), false});
  all.push_back({"every other column (gaps)", torch::randn({6, 10}, f).slice(1, 0, 10, 2), false});
  all.push_back({"empty", torch::empty({0, 3}, f), true});
  all.push_back({"conjugate view", torch::conj(torch::randn({4}, f.dtype(torch::kComplexFloat))), false});
  return all;
}

TEST_F(DeviceCopy, CopyIntoMatchesAtenForEveryLayout) {
  for (const auto& c : cases()) {
    SCOPED_TRACE(c.what);
    // The destination as a graph's buffer is made, the source's sizes and strides in new memory;
    // a graph takes no input whose elements share memory, so those get a contiguous one here.
    const bool dense = c.source.is_non_overlapping_and_dense();
    auto destination = dense ? at::empty_strided(c.source.sizes(), c.source.strides(), c.source.options())
                             : at::empty(c.source.sizes(), c.source.options());
    destination.fill_(destination.scalar_type() == at::kBool ? 0 : 123);  // poison
    EXPECT_EQ(same_dense_layout(destination, c.source), c.memcpy);
    copy_into(destination, c.source);
    expect_equal_values(destination, c.source.resolve_conj());
  }
}

TEST_F(DeviceCopy, CopyOfKeepsStridesInNewMemory) {
  for (const auto& c : cases()) {
    SCOPED_TRACE(c.what);
    const auto copy = copy_of(c.source);
    const auto expected = c.source.clone(at::MemoryFormat::Preserve);
    expect_equal_values(copy, expected);
    EXPECT_EQ(copy.strides(), expected.strides());
    EXPECT_EQ(copy.is_conj(), expected.is_conj());
    if (c.source.numel() > 0) EXPECT_NE(copy.data_ptr(), c.source.data_ptr());
  }
}

TEST_F(DeviceCopy, OnlyTheStridesThatMoveElementsMatter) {
  auto options = torch::TensorOptions().device(kDevice);
  auto source = torch::randn({3, 1, 4}, options);  // strides {4, 4, 1}
  auto destination = at::empty_strided({3, 1, 4}, {4, 99, 1}, options);
  EXPECT_TRUE(same_dense_layout(destination, source)) << "a size-1 dimension's stride moves no element";
  copy_into(destination, source);
  expect_equal_values(destination, source);

  // Equal strides with gaps between the elements: not one run of bytes, so through ATen.
  auto gapped = torch::randn({6, 10}, options).slice(1, 0, 10, 2);
  auto gapped_destination = at::empty_strided(gapped.sizes(), gapped.strides(), options).fill_(123);
  EXPECT_FALSE(same_dense_layout(gapped_destination, gapped));
  copy_into(gapped_destination, gapped);
  expect_equal_values(gapped_destination, gapped);

  EXPECT_FALSE(same_dense_layout(source, source)) << "one memory: not a memcpy";
}

TEST_F(DeviceCopy, DifferentLayoutsOrDtypesGoThroughAten) {
  auto source = torch::randn({4, 6}, torch::TensorOptions().device(kDevice));
  auto transposed = torch::empty({6, 4}, source.options()).t();  // sizes {4, 6}, strides {1, 4}
  EXPECT_FALSE(same_dense_layout(transposed, source));
  copy_into(transposed, source);
  expect_equal_values(transposed, source);

  auto half = torch::empty({4, 6}, source.options().dtype(torch::kHalf));
  EXPECT_FALSE(same_dense_layout(half, source));
  copy_into(half, source);
  expect_equal_values(half, source.to(torch::kHalf));

  auto host = torch::empty({4, 6});
  EXPECT_FALSE(same_dense_layout(host, source));
  copy_into(host, source);
  expect_equal_values(host, source);
}

// The copies are queued on the current stream, after the work queued there before them: a side
// stream's write, held back by a sleep queued before it, is in both (a copy on another stream
// would read the zeros).
TEST_F(DeviceCopy, CopiesAreOrderedOnTheCurrentStream) {
  auto source = torch::zeros({1 << 20}, torch::TensorOptions().device(kDevice));
  torch::cuda::synchronize();
  auto stream = c10::cuda::getStreamFromPool(false, kDevice.index());
  c10::cuda::CUDAStreamGuard on(stream);
  at::cuda::sleep(50'000'000);  // tens of milliseconds on any current GPU
  source.add_(1.5);
  auto destination = torch::empty_like(source);
  copy_into(destination, source);
  const auto copy = copy_of(source);
  stream.synchronize();
  EXPECT_TRUE(torch::all(destination == 1.5).item<bool>());
  EXPECT_TRUE(torch::all(copy == 1.5).item<bool>());
}

}  // namespace
