// The backward capture on a hand-built forward: it makes inputs of the forward values its rules
// read and of no others, puts them before the gradients, computes autograd's gradients on fresh
// values, and keeps none of the values it was given once it is done (the training capture's peak
// memory depends on it letting them go).
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
  auto captured = capture_backward(f.graph, forward_values(f.graph, {at::randn({3, 4}), at::randn({4, 5})}),
                                   {false, true});
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

TEST(BackwardCapture, KeepsNoneOfTheValuesItWasGiven) {
  const auto f = small_forward();
  at::manual_seed(48);
  auto x = at::randn({3, 4}), w = at::randn({4, 5});
  auto values = forward_values(f.graph, {x, w});
  std::vector<c10::weak_intrusive_ptr<c10::TensorImpl>> intermediates;
  for (int id : {f.product, f.relu, f.doubled, f.total}) intermediates.emplace_back(values[id].getIntrusivePtr());
  auto captured = capture_backward(f.graph, std::move(values), {false, true});
  ASSERT_TRUE(captured.unsupported.empty()) << captured.unsupported;
  for (std::size_t k = 0; k < intermediates.size(); ++k) {
    EXPECT_TRUE(intermediates[k].expired()) << "intermediate " << k << " is still held";
  }
}

}  // namespace
}  // namespace zenith::capture
