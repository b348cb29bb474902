// runtime/state_layout.h: a module's state tensors checked at every call for a layout changed in
// place (set_data, resize_, set_, a dtype or requires_grad changed), and nothing else.
#include <functional>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "runtime/state_layout.h"

namespace {

using zenith::detail::StateLayout;

StateLayout::State state_of(std::vector<at::Tensor> tensors) {
  StateLayout::State state;
  for (std::size_t i = 0; i < tensors.size(); ++i) state.emplace_back("t" + std::to_string(i), tensors[i]);
  return state;
}

TEST(StateLayout, HoldsWhileOnlyValuesChange) {
  torch::manual_seed(3);
  auto state = state_of({torch::randn({4, 3}), torch::randn({5}), torch::zeros({}), torch::randn({2, 3, 4, 5})});
  const StateLayout layout(state);
  EXPECT_TRUE(layout.holds(state));
  torch::NoGradGuard no_grad;
  for (auto& item : state) item.second.add_(1);  // in place: values, not layouts
  state[0].second.copy_(torch::randn({4, 3}));
  EXPECT_TRUE(layout.holds(state));
}

TEST(StateLayout, SeesEveryLayoutChangedInPlace) {
  torch::manual_seed(4);
  struct Change {
    const char* what;
    std::function<void(at::Tensor&)> apply;
  };
  const std::vector<Change> changes = {
      {"resized", [](at::Tensor& t) { t.resize_({6, 2}); }},
      {"data replaced by another shape", [](at::Tensor& t) { t.set_data(torch::randn({3, 4})); }},
      {"data replaced by another dtype", [](at::Tensor& t) { t.set_data(torch::randn({4, 3}).to(torch::kDouble)); }},
      {"transposed in place (strides)", [](at::Tensor& t) { t.t_(); }},
      {"a view of other strides set in place", [](at::Tensor& t) { t.set_(torch::randn({3, 4}).t()); }},
      {"requires_grad turned on", [](at::Tensor& t) { t.set_requires_grad(true); }},
      {"one more dimension, the sizes before it the same", [](at::Tensor& t) { t.unsqueeze_(-1); }},
      {"another device, the same sizes and strides", [](at::Tensor& t) { t = torch::empty({4, 3}, torch::kMeta); }},
  };
  for (const auto& change : changes) {
    SCOPED_TRACE(change.what);
    auto state = state_of({torch::randn({5}), torch::randn({4, 3}), torch::randn({2})});
    const StateLayout layout(state);
    change.apply(state[1].second);
    EXPECT_FALSE(layout.holds(state));
  }
}

TEST(StateLayout, RequiresGradIsComparedOnlyWhenAsked) {
  torch::manual_seed(5);
  auto state = state_of({torch::randn({5}), torch::randn({4, 3})});
  const StateLayout layout(state);
  state[1].second.set_requires_grad(true);
  EXPECT_FALSE(layout.holds(state, /*with_requires_grad=*/true));
  EXPECT_TRUE(layout.holds(state, /*with_requires_grad=*/false));
  state[1].second.set_data(torch::randn({12}));
  EXPECT_FALSE(layout.holds(state, /*with_requires_grad=*/false)) << "the rest of the layout is still compared";
}

TEST(StateLayout, UndefinedTensorsAndCounts) {
  auto state = state_of({torch::randn({2}), at::Tensor()});
  const StateLayout layout(state);
  EXPECT_TRUE(layout.holds(state));
  auto defined_now = state;
  defined_now[1].second = torch::randn({2});
  EXPECT_FALSE(layout.holds(defined_now)) << "undefined when recorded, defined now";
  auto undefined_now = state;
  undefined_now[0].second = at::Tensor();
  EXPECT_TRUE(layout.holds(undefined_now)) << "a slot that loses its tensor is the slot check's to see";
  auto longer = state;
  longer.emplace_back("t2", torch::randn({1}));
  EXPECT_FALSE(layout.holds(longer));
  EXPECT_TRUE(StateLayout(state_of({})).holds(state_of({})));
}

}  // namespace
