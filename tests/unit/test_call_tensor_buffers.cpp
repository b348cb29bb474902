// runtime/call_tensor_buffers.h: a leased vector is call_tensors(args, state) whatever was leased
// before; it keeps no caller's tensor after the call, and no old state's once retired.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "runtime/call_tensor_buffers.h"
#include "runtime/call_tensors.h"

namespace {

using zenith::detail::CallTensorBuffers;
using zenith::detail::call_tensors;

CallTensorBuffers::State state_of(std::vector<at::Tensor> tensors) {
  CallTensorBuffers::State state;
  for (std::size_t i = 0; i < tensors.size(); ++i) state.emplace_back("s" + std::to_string(i), tensors[i]);
  return state;
}

// The same tensors (by identity), in the same order.
void expect_same(const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(got[i].is_same(want[i])) << "tensor " << i;
}

TEST(CallTensorBuffers, ALeaseIsTheCallsTensorsWhateverCameBefore) {
  torch::manual_seed(1);
  CallTensorBuffers buffers;
  const auto state = state_of({torch::randn({3}), torch::randn({2, 2})});
  const auto other_state = state_of({torch::randn({4})});
  const std::vector<std::vector<c10::IValue>> calls = {
      {torch::randn({2}), 3, torch::randn({5})},
      {torch::randn({2}), 4, torch::randn({5})},  // the same shape of call: the vector is reused
      {torch::randn({1})},                        // fewer tensor arguments
      {},
  };
  for (std::size_t c = 0; c < calls.size(); ++c) {
    SCOPED_TRACE("call " + std::to_string(c));
    expect_same(buffers.lease(calls[c], state, 1).tensors(), call_tensors(calls[c], state));
  }
  // Another generation is another state, even of the same size.
  const auto replaced = state_of({torch::randn({3}), torch::randn({2, 2})});
  expect_same(buffers.lease(calls[0], replaced, 2).tensors(), call_tensors(calls[0], replaced));
  expect_same(buffers.lease(calls[0], other_state, 3).tensors(), call_tensors(calls[0], other_state));
}

TEST(CallTensorBuffers, ConcurrentLeasesAreDistinct) {
  torch::manual_seed(2);
  CallTensorBuffers buffers;
  const auto state = state_of({torch::randn({3})});
  const std::vector<c10::IValue> first = {torch::randn({2})};
  const std::vector<c10::IValue> second = {torch::randn({2})};
  { const auto ended = buffers.lease(first, state, 1); }  // one vector kept: the next lease reuses it
  auto a = buffers.lease(first, state, 1);
  auto b = buffers.lease(second, state, 1);
  expect_same(a.tensors(), call_tensors(first, state));
  expect_same(b.tensors(), call_tensors(second, state));
}

TEST(CallTensorBuffers, NoCallersTensorIsKeptAfterItsCall) {
  torch::manual_seed(3);
  CallTensorBuffers buffers;
  const auto state = state_of({torch::randn({3})});
  auto x = torch::randn({2});
  const auto alone = x.use_count();
  {
    const auto lease = buffers.lease({x}, state, 1);
    EXPECT_GT(x.use_count(), alone) << "held while the call runs";
  }
  EXPECT_EQ(x.use_count(), alone) << "released when the lease ends";
}

TEST(CallTensorBuffers, ARetiredStatesTensorsAreLetGo) {
  torch::manual_seed(4);
  CallTensorBuffers buffers;
  auto parameter = torch::randn({3});
  const auto alone = parameter.use_count();
  {
    const auto state = state_of({parameter});
    auto in_flight = buffers.lease({}, state, 1);
    { const auto ended = buffers.lease({}, state, 1); }  // kept for the next call
    buffers.retire_before(2);
    // in_flight, of generation 1, is given back after the retirement: dropped too.
  }
  EXPECT_EQ(parameter.use_count(), alone) << "no kept vector holds the retired state's tensor";
}

}  // namespace
