// Parameter packing (runtime/parameter_packing.h, CompileOptions::pack_parameters): parameters
// whose concatenation an inference plan keeps move into it, so that the kept value is a view of
// them and costs no memory of its own. On the CPU the concatenation is the module's own
// `cat([a, b, c])` (the sibling-products rewrite makes the same on CUDA). Every call has a fresh
// input and is compared with eager; parameters keep their values, sizes and strides, and updates
// in place and replacements after packing are seen.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "common/no_fallback.h"
#include "common_relative_error.h"
#include "runtime/parameter_packing.h"
#include "zenith/compile.h"

namespace zenith {
namespace {

using testing::no_fallback;
using testing::relative_error;

// The CPU plugin runs ATen's kernels in eager's order: 1e-6 of the largest value leaves room for a
// vectorized kernel's other summation order; a stale or misplaced weight is off by order one.
constexpr double kTolerance = 1e-6;

// Three projections of one input through their weights concatenated, as a fused q, k, v product.
// 16 x 8 float32 weights: 512 bytes each, so each starts 256-byte aligned in a packed block.
struct ConcatenatedProjectionImpl : torch::nn::Module {
  ConcatenatedProjectionImpl() {
    a = register_parameter("a", torch::randn({16, 8}));
    b = register_parameter("b", torch::randn({16, 8}));
    c = register_parameter("c", torch::randn({16, 8}));
  }
  torch::Tensor forward(const torch::Tensor& x) { return torch::relu(torch::matmul(x, torch::cat({a, b, c}).t())); }
  torch::Tensor a, b, c;
};
TORCH_MODULE(ConcatenatedProjection);

const char* address(const torch::Tensor& tensor) { return static_cast<const char*>(tensor.data_ptr()); }

bool adjacent(const ConcatenatedProjection& model) {
  return address(model->b) == address(model->a) + model->a.nbytes() &&
         address(model->c) == address(model->b) + model->b.nbytes();
}

class ParameterPacking : public ::testing::Test {
 protected:
  void SetUp() override { torch::manual_seed(41); }

  // Three calls on fresh inputs of `rows` rows, each compared with eager.
  template <typename Compiled>
  void check(Compiled& fast, ConcatenatedProjection& model, const std::string& what, std::int64_t rows = 4) {
    for (int call = 0; call < 3; ++call) {
      auto x = torch::randn({rows, 8});
      EXPECT_LT(relative_error(fast(x), model->forward(x)), kTolerance) << what << ", call " << call;
    }
  }
};

TEST_F(ParameterPacking, TheParametersMoveIntoTheConcatenationWithTheirValues) {
  torch::NoGradGuard no_grad;
  ConcatenatedProjection model;
  const auto before = torch::cat({model->a, model->b, model->c}).clone();
  const auto* old_a = address(model->a);
  auto fast = compile(model, no_fallback("packed"));
  check(fast, model, "first calls");
  EXPECT_EQ(fast.stats().packed_parameters, 3);
  EXPECT_EQ(fast.stats().packed_bytes, 3 * 16 * 8 * 4);
  EXPECT_TRUE(adjacent(model)) << "one block, in the concatenation's order";
  EXPECT_NE(address(model->a), old_a);
  for (const auto& p : {model->a, model->b, model->c}) {
    EXPECT_EQ(p.sizes(), torch::IntArrayRef({16, 8}));
    EXPECT_TRUE(p.is_contiguous());
    EXPECT_TRUE(p.requires_grad()) << "a parameter stays one";
  }
  EXPECT_TRUE(torch::equal(torch::cat({model->a, model->b, model->c}), before)) << "values are moved, not changed";
  EXPECT_EQ(fast.stats().derived_computations, 1);
  EXPECT_EQ(fast.stats().kept_bytes, 0) << "the kept concatenation (and its transpose) are views of the block";
  // The kept concatenation is a view of the block, not a copy: a write that bypasses the version
  // counter (which a copy would miss, CompileOptions::keep_derived_values) reaches it.
  model->b.data().mul_(-1);
  check(fast, model, "after a write through .data()");
  EXPECT_EQ(fast.stats().derived_computations, 1) << "nothing computed again";
  EXPECT_EQ(fast.stats().eager_calls, 0);
}

TEST_F(ParameterPacking, UpdatesInPlaceAndReplacementsAfterPackingAreSeen) {
  torch::NoGradGuard no_grad;
  ConcatenatedProjection model;
  auto fast = compile(model, no_fallback("packed-updates"));
  check(fast, model, "first calls");
  ASSERT_TRUE(adjacent(model));
  // Written in the block: the kept concatenation is a view of it.
  model->b.mul_(-2);
  check(fast, model, "after an update in place");
  EXPECT_TRUE(adjacent(model)) << "an update in place moves nothing";
  EXPECT_EQ(fast.stats().derived_computations, 2);
  // Another tensor: the concatenation is a copy again, computed from the new one.
  model->c.set_data(torch::randn({16, 8}));
  check(fast, model, "after a replacement");
  EXPECT_EQ(fast.stats().derived_computations, 3);
  EXPECT_EQ(fast.stats().kept_bytes, 3 * 16 * 8 * 4) << "a copy again, held once";
  model->a.add_(1);
  check(fast, model, "after an update in place of a parameter still in the block");
  EXPECT_EQ(fast.stats().eager_calls, 0);
}

TEST_F(ParameterPacking, PlansOfTwoSignaturesPackOnce) {
  torch::NoGradGuard no_grad;
  ConcatenatedProjection model;
  auto fast = compile(model, no_fallback("packed-two"));
  for (int round = 0; round < 2; ++round) {
    for (std::int64_t rows : {4, 6}) check(fast, model, "round " + std::to_string(round), rows);
  }
  EXPECT_EQ(fast.stats().misses, 2);
  EXPECT_EQ(fast.stats().packed_parameters, 3) << "the second plan finds them packed";
  EXPECT_TRUE(adjacent(model));
}

TEST_F(ParameterPacking, AParameterWhoseMemoryIsSharedStaysWhereItIs) {
  torch::NoGradGuard no_grad;
  ConcatenatedProjection model;
  const auto alias = model->b.detach();  // another tensor over b's memory
  const auto* old_b = address(model->b);
  auto fast = compile(model, no_fallback("shared"));
  check(fast, model, "first calls");
  EXPECT_EQ(fast.stats().packed_parameters, 0);
  EXPECT_EQ(address(model->b), old_b);
  EXPECT_EQ(fast.stats().kept_bytes, 3 * 16 * 8 * 4) << "the plan keeps a copy of the concatenation";
  alias.mul_(3);  // b itself: still seen, through the copy computed again
  check(fast, model, "after a write through the alias");
}

TEST_F(ParameterPacking, OffByOptionTheParametersStay) {
  torch::NoGradGuard no_grad;
  ConcatenatedProjection model;
  const auto* old_a = address(model->a);
  auto options = no_fallback("not-packed");
  options.pack_parameters = false;
  auto fast = compile(model, options);
  check(fast, model, "first calls");
  EXPECT_EQ(fast.stats().packed_parameters, 0);
  EXPECT_EQ(address(model->a), old_a);
  EXPECT_EQ(fast.stats().kept_bytes, 3 * 16 * 8 * 4) << "the plan keeps a copy of the concatenation";
}

TEST(AdjacentConcatenation, IsAViewOnlyOfPiecesOneAfterAnother) {
  auto block = torch::arange(24, torch::kFloat);
  auto first = block.narrow(0, 0, 8).view({2, 4}), second = block.narrow(0, 8, 16).view({4, 4});
  auto joined = adjacent_concatenation({first, second});
  ASSERT_TRUE(joined.defined());
  EXPECT_EQ(joined.sizes(), torch::IntArrayRef({6, 4}));
  EXPECT_EQ(joined.data_ptr(), block.data_ptr());
  EXPECT_TRUE(torch::equal(joined, torch::cat({first, second})));
  EXPECT_FALSE(adjacent_concatenation({second, first}).defined()) << "out of order";
  EXPECT_FALSE(adjacent_concatenation({first, block.narrow(0, 12, 8).view({2, 4})}).defined()) << "a gap";
  EXPECT_FALSE(adjacent_concatenation({first, torch::zeros({2, 4})}).defined()) << "another storage";
  EXPECT_FALSE(adjacent_concatenation({first, block.narrow(0, 8, 8).view({4, 2})}).defined()) << "other widths";
}

TEST(PackingRefusal, SaysWhyAndPacksNothing) {
  torch::NoGradGuard no_grad;
  auto whole = [] { return torch::randn({4, 16}); };  // 256 bytes
  EXPECT_EQ(packing_refusal({whole(), whole()}), "");
  EXPECT_EQ(packing_refusal({whole()}), "fewer than two tensors");
  auto a = whole();
  EXPECT_EQ(packing_refusal({a, a}), "tensor 2 of 2 appears twice");
  EXPECT_EQ(packing_refusal({whole(), whole().to(torch::kDouble)}), "tensor 2 of 2 is Double on cpu, the first Float on cpu");
  EXPECT_EQ(packing_refusal({whole(), torch::randn({4, 8})}), "tensor 2 of 2 has other sizes after the first dimension");
  EXPECT_EQ(packing_refusal({whole(), whole().t()}), "tensor 2 of 2 has other sizes after the first dimension");
  EXPECT_EQ(packing_refusal({whole(), torch::randn({16, 4}).t()}), "tensor 2 of 2 is not contiguous");
  EXPECT_EQ(packing_refusal({whole(), torch::randn({8, 16}).narrow(0, 0, 4)}), "tensor 2 of 2 is a view of another tensor");
  auto shared = whole();
  auto alias = shared.detach();
  EXPECT_EQ(packing_refusal({whole(), shared}), "tensor 2 of 2 shares its memory with another tensor");
  EXPECT_EQ(packing_refusal({torch::randn({3}), torch::randn({3})}),
            "tensor 2 of 2 would start at byte 12 of the block, not a multiple of 256");
  torch::Tensor made_in_inference_mode;
  {
    c10::InferenceMode inference;
    made_in_inference_mode = whole();
  }
  EXPECT_EQ(packing_refusal({whole(), made_in_inference_mode}),
            "tensor 2 of 2 is an inference tensor (made under InferenceMode), which stays where it is");
}

TEST(PackIntoOneBlock, KeepsEveryTensorsValuesAndIdentity) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> pieces = {torch::randn({4, 16}), torch::randn({8, 16}), torch::randn({4, 16})};
  std::vector<torch::Tensor> before;
  for (const auto& piece : pieces) before.push_back(piece.clone());
  const auto* impl = pieces[1].unsafeGetTensorImpl();
  EXPECT_EQ(pack_into_one_block(pieces), 16 * 16 * 4);
  for (std::size_t k = 0; k < pieces.size(); ++k) EXPECT_TRUE(torch::equal(pieces[k], before[k])) << k;
  EXPECT_EQ(pieces[1].unsafeGetTensorImpl(), impl);
  auto joined = adjacent_concatenation(pieces);
  ASSERT_TRUE(joined.defined());
  EXPECT_TRUE(torch::equal(joined, torch::cat(before)));
}

// pack_through_host, the way packing takes on a device, run here on host memory with allocators
// of the tests' own: the pieces let their memory go before the block is made, and a block that
// cannot be made puts them back.
class PackThroughHost : public ::testing::Test {
 protected:
  void SetUp() override {
    torch::manual_seed(43);
    pieces = {torch::randn({4, 16}), torch::randn({8, 16}), torch::randn({4, 16})};
    for (auto& piece : pieces) piece.requires_grad_(true);  // parameters
    for (const auto& piece : pieces) before.push_back(piece.detach().clone());
  }
  // The pieces hold their old values, each in memory of its own.
  void expect_put_back() {
    for (std::size_t k = 0; k < pieces.size(); ++k) {
      EXPECT_EQ(pieces[k].sizes(), before[k].sizes()) << k;
      EXPECT_TRUE(pieces[k].is_contiguous()) << k;
      EXPECT_TRUE(torch::equal(pieces[k].detach(), before[k])) << k;
      EXPECT_EQ(pieces[k].storage().nbytes(), pieces[k].nbytes()) << k;
    }
    EXPECT_FALSE(adjacent_concatenation(pieces).defined());
  }
  std::vector<torch::Tensor> pieces, before;
  int allocations = 0;
};

TEST_F(PackThroughHost, ThePiecesLetTheirMemoryGoBeforeTheBlockIsMade) {
  const auto* impl = pieces[1].unsafeGetTensorImpl();
  std::vector<std::int64_t> sizes_when_allocating;
  const auto bytes = pack_through_host(pieces, [&](at::IntArrayRef sizes, const at::TensorOptions& options) {
    ++allocations;
    for (const auto& piece : pieces) sizes_when_allocating.push_back(piece.numel());
    return at::empty(sizes, options);
  });
  EXPECT_EQ(bytes, 16 * 16 * 4);
  EXPECT_EQ(allocations, 1);
  EXPECT_EQ(sizes_when_allocating, (std::vector<std::int64_t>{0, 0, 0})) << "no piece holds memory while the block is made";
  for (std::size_t k = 0; k < pieces.size(); ++k) {
    EXPECT_TRUE(torch::equal(pieces[k].detach(), before[k])) << k;
    EXPECT_TRUE(pieces[k].requires_grad()) << "a parameter stays one";
  }
  EXPECT_EQ(pieces[1].unsafeGetTensorImpl(), impl);
  auto joined = adjacent_concatenation(pieces);
  ASSERT_TRUE(joined.defined());
  EXPECT_TRUE(torch::equal(joined, torch::cat(before)));
}

TEST_F(PackThroughHost, ABlockThatCannotBeMadePutsThePiecesBackAndSaysWhy) {
  auto fail_first = [&](at::IntArrayRef sizes, const at::TensorOptions& options) {
    if (allocations++ == 0) throw std::runtime_error("out of memory making the block");
    return at::empty(sizes, options);
  };
  try {
    pack_through_host(pieces, fail_first);
    FAIL() << "the block's failure went unsaid";
  } catch (const PackedParametersLost&) {
    FAIL() << "the pieces could be put back";
  } catch (const std::runtime_error& error) {
    EXPECT_STREQ(error.what(), "out of memory making the block");
  }
  EXPECT_EQ(allocations, 4) << "the block, then each piece's own memory";
  expect_put_back();
}

TEST_F(PackThroughHost, PiecesThatCannotBePutBackAreSaidToBeLost) {
  auto fail = [&](at::IntArrayRef, const at::TensorOptions&) -> at::Tensor {
    ++allocations;
    throw std::runtime_error("out of memory");
  };
  try {
    pack_through_host(pieces, fail);
    FAIL() << "lost parameters went unsaid";
  } catch (const PackedParametersLost& error) {
    EXPECT_NE(std::string(error.what()).find("3 parameters"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("ZENITH_PACK_PARAMETERS=0"), std::string::npos) << error.what();
  }
  EXPECT_EQ(allocations, 2) << "the block, then the first piece's own memory";
  EXPECT_EQ(pieces[0].numel(), 0) << "what the error says: the parameters are empty";
}

}  // namespace
}  // namespace zenith
