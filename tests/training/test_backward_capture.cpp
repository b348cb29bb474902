// The backward capture on hand-built forwards: it makes inputs of the forward values its rules
// read and of no others, puts them before the gradients, and computes autograd's gradients on fresh
// values. Its forward run keeps no floating intermediate (the rules ran on zeros in their place)
// but keeps the indices a rule reads, and the capture keeps none of what it was given once it is
// done (the training capture's peak memory depends on both).
#include <gtest/gtest.h>

#include <algorithm>

#include <ATen/ATen.h>
#include <c10/util/intrusive_ptr.h>

#include "capture/backward_capture.h"
#include "common_relative_error.h"
#include "core/interpreter.h"
#include "unit/graph_builders.h"

namespace zenith::capture {
namespace {

using testing::value;

struct Forward {
  ir::Graph graph;
  int x, w, product, relu, doubled, total;
};

// sum(relu(x @ w) * 2), w the parameter that needs a gradient.
Forward small_forward() {
  testing::GraphBuilder b;
  Forward f;
  f.x = b.input({3, 4});
  f.w = b.parameter({4, 5}, "w");
  f.product = b.op("aten::mm", "", {value("self", f.x), value("mat2", f.w)});
  f.relu = b.op("aten::relu", "", {value("self", f.product)});
  f.doubled = b.op("aten::mul", "Scalar", {value("self", f.relu), testing::real("other", 2.0)});
  f.total = b.op("aten::sum", "", {value("self", f.doubled), testing::none("dtype")});
  f.graph = b.finish({f.total});
  return f;
}

TEST(BackwardCapture, ReadsOnlyTheValuesItsRulesReadSavedFirstAndComputesAutogradsGradient) {
  const auto f = small_forward();
  at::manual_seed(47);
  auto captured = capture_backward(
      f.graph, forward_run_for_backward(f.graph, {at::randn({3, 4}), at::randn({4, 5})}, {false, true}), {false, true});
  ASSERT_TRUE(captured.unsupported.empty()) << captured.unsupported;
  const auto& backward = captured.backward;
  // mm's rule reads x for w's gradient, relu's reads its result or its input; the product by a
  // constant and the sum read nothing.
  EXPECT_NE(std::find(backward.saved.begin(), backward.saved.end(), f.x), backward.saved.end());
  for (int unread : {f.w, f.doubled, f.total}) {
    EXPECT_EQ(std::find(backward.saved.begin(), backward.saved.end(), unread), backward.saved.end()) << "%" << unread;
  }
  ASSERT_EQ(backward.output_gradients, std::vector<int>{0});
  ASSERT_EQ(backward.graph.inputs.size(), backward.saved.size() + 1) << "the saved values, then the one gradient";
  ASSERT_EQ(backward.input_gradients, std::vector<int>{1});

  // On values the capture never saw: the saved ones from a fresh forward, the gradient of the sum.
  for (int draw = 0; draw < 2; ++draw) {
    auto x = at::randn({3, 4}), w = at::randn({4, 5});
    auto values = forward_values(f.graph, {x, w});
    std::vector<at::Tensor> inputs;
    for (int id : backward.saved) inputs.push_back(values[id]);
    inputs.push_back(at::ones({}));
    const auto got = ir::interpret(backward.graph, inputs).at(0);
    auto leaf = w.clone().requires_grad_(true);
    (at::relu(at::mm(x, leaf)) * 2).sum().backward();
    // The same float32 kernels, one product summed in another order at most.
    EXPECT_LT(testing::relative_error(got, leaf.grad()), 1e-6) << "draw " << draw;
  }
}

TEST(BackwardCapture, ItsForwardRunKeepsTheInputsAndNoFloatingIntermediate) {
  const auto f = small_forward();
  at::manual_seed(48);
  auto x = at::randn({3, 4}), w = at::randn({4, 5});
  const auto run = forward_run_for_backward(f.graph, {x, w}, {false, true});
  EXPECT_TRUE(run.kept.at(f.x).is_same(x));
  EXPECT_TRUE(run.kept.at(f.w).is_same(w));
  for (int id : {f.product, f.relu, f.doubled, f.total}) {
    EXPECT_FALSE(run.kept.at(id).defined()) << "%" << id << " is kept";
    ASSERT_TRUE(run.types.at(id).has_value()) << "%" << id << " has no type";
  }
  EXPECT_EQ(run.types.at(f.relu)->sizes, (std::vector<std::int64_t>{3, 5}));
  EXPECT_EQ(run.types.at(f.relu)->strides, (std::vector<std::int64_t>{5, 1}));
  EXPECT_EQ(run.types.at(f.total)->sizes, std::vector<std::int64_t>{});
}

struct Pooled {
  ir::Graph graph;
  int x, pooled, indices, total;
};

// sum(max_pool2d_with_indices(x)[0] * 3): the pool's rule reads its integer indices.
Pooled pooled_forward() {
  testing::GraphBuilder b;
  Pooled f;
  f.x = b.input({2, 3, 6, 6});
  const auto pool = b.apply("aten::max_pool2d_with_indices", "",
                            {value("self", f.x), testing::ints("kernel_size", {2, 2}), testing::ints("stride", {2, 2}),
                             testing::ints("padding", {0, 0}), testing::ints("dilation", {1, 1}),
                             ir::Argument{"ceil_mode", false}});
  f.pooled = pool.at(0);
  f.indices = pool.at(1);
  const int tripled = b.op("aten::mul", "Scalar", {value("self", f.pooled), testing::real("other", 3.0)});
  f.total = b.op("aten::sum", "", {value("self", tripled), testing::none("dtype")});
  f.graph = b.finish({f.total});
  return f;
}

TEST(BackwardCapture, KeepsTheIndicesARuleReadsAndComputesAutogradsGradientFromThem) {
  const auto f = pooled_forward();
  at::manual_seed(49);
  auto run = forward_run_for_backward(f.graph, {at::randn({2, 3, 6, 6})}, {true});
  ASSERT_TRUE(run.kept.at(f.indices).defined()) << "the pool's indices steer its gradient: they are kept";
  EXPECT_FALSE(run.kept.at(f.pooled).defined());
  const c10::weak_intrusive_ptr<c10::TensorImpl> indices(run.kept.at(f.indices).getIntrusivePtr());
  auto captured = capture_backward(f.graph, std::move(run), {true});
  ASSERT_TRUE(captured.unsupported.empty()) << captured.unsupported;
  EXPECT_TRUE(indices.expired()) << "the capture still holds the indices it was given";
  const auto& backward = captured.backward;
  ASSERT_NE(std::find(backward.saved.begin(), backward.saved.end(), f.indices), backward.saved.end());

  for (int draw = 0; draw < 2; ++draw) {
    auto x = at::randn({2, 3, 6, 6});
    auto values = forward_values(f.graph, {x});
    std::vector<at::Tensor> inputs;
    for (int id : backward.saved) inputs.push_back(values[id]);
    inputs.push_back(at::ones({}));
    const auto got = ir::interpret(backward.graph, inputs).at(0);
    auto leaf = x.clone().requires_grad_(true);
    (std::get<0>(at::max_pool2d_with_indices(leaf, {2, 2}, {2, 2})) * 3).sum().backward();
    // Each gradient element is 3 or 0, routed by the indices: exact.
    EXPECT_TRUE(at::equal(got, leaf.grad())) << "draw " << draw;
  }
}

}  // namespace
}  // namespace zenith::capture
