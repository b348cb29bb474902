// runtime/signature.h: has_signature says what building the signature and comparing would say,
// for every pair of a set of calls that differ in one way each (and for the grad mode, the
// training flag, the parameters' fingerprint and autocast), and never matches a call with a
// non-tensor argument (the engine builds those calls' signatures).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ATen/autocast_mode.h>

#include "runtime/signature.h"

namespace zenith {
namespace {

std::vector<std::pair<std::string, std::vector<c10::IValue>>> calls() {
  torch::manual_seed(6);
  return {
      {"float32 [3, 4]", {torch::randn({3, 4})}},
      {"float32 [3, 4], another tensor", {torch::randn({3, 4})}},
      {"float64 [3, 4]", {torch::randn({3, 4}, torch::kDouble)}},
      {"float32 [3, 4] transposed", {torch::randn({4, 3}).t()}},
      {"float32 [3, 4] expanded", {torch::randn({1, 4}).expand({3, 4})}},
      {"float32 [3, 4] requiring grad", {torch::randn({3, 4}).requires_grad_(true)}},
      {"float32 [3, 5]", {torch::randn({3, 5})}},
      {"float32 [3, 4, 1]", {torch::randn({3, 4, 1})}},
      {"float32 [1, 4]", {torch::randn({1, 4})}},
      {"float32 [1, 4] sliced from [4, 8] (a unit dimension's stride)", {torch::randn({4, 8}).slice(0, 0, 1).slice(1, 0, 4)}},
      {"float32 [0, 4]", {torch::randn({0, 4})}},
      {"float32 [1, 0]", {torch::randn({1, 0})}},
      {"float32 [4, 1] with an innermost stride of 4", {torch::randn({3, 4}).t().slice(1, 0, 1)}},
      {"float32 [4, 1]", {torch::randn({4, 1})}},
      {"meta [3, 4]", {torch::empty({3, 4}, torch::kMeta)}},
      {"two tensors", {torch::randn({3, 4}), torch::randn({3, 4})}},
      {"no argument", {}},
  };
}

TEST(Signature, HasSignatureAgreesWithBuildingOne) {
  const auto all = calls();
  for (const auto& [built_from, built_args] : all) {
    const auto signature = make_signature(built_args, /*state_fingerprint=*/7, /*training=*/false);
    for (const auto& [name, args] : all) {
      SCOPED_TRACE("signature of " + built_from + ", call " + name);
      EXPECT_EQ(has_signature(signature, args, 7, false), make_signature(args, 7, false) == signature);
    }
  }
}

TEST(Signature, AUnitDimensionsStrideDoesNotKeepACallFromItsSignature) {
  torch::manual_seed(9);
  const auto contiguous = make_signature({torch::randn({4, 1})}, 7, false);
  EXPECT_TRUE(has_signature(contiguous, {torch::randn({3, 4}).t().slice(1, 0, 1)}, 7, false));
  const auto row = make_signature({torch::randn({1, 4})}, 7, false);
  EXPECT_TRUE(has_signature(row, {torch::randn({4, 8}).slice(0, 0, 1).slice(1, 0, 4)}, 7, false));
  EXPECT_FALSE(has_signature(row, {torch::randn({4, 8}).t().slice(0, 0, 1)}, 7, false)) << "stride 8 along the 4";
}

TEST(Signature, HasSignatureSeesTheCallsContext) {
  torch::manual_seed(7);
  const std::vector<c10::IValue> args = {torch::randn({3, 4})};
  const auto signature = make_signature(args, 7, false);
  EXPECT_TRUE(has_signature(signature, args, 7, false));
  EXPECT_FALSE(has_signature(signature, args, 8, false)) << "another parameters' fingerprint";
  EXPECT_FALSE(has_signature(signature, args, 7, true)) << "the module in training";
  {
    at::AutoGradMode grad(!signature.grad_mode);
    EXPECT_FALSE(has_signature(signature, args, 7, false)) << "another grad mode";
  }
  {
    // Restores the thread's autocast state whatever the checks below do.
    struct CpuAutocast {
      bool enabled = at::autocast::is_autocast_enabled(at::kCPU);
      at::ScalarType dtype = at::autocast::get_autocast_dtype(at::kCPU);
      ~CpuAutocast() {
        at::autocast::set_autocast_enabled(at::kCPU, enabled);
        at::autocast::set_autocast_dtype(at::kCPU, dtype);
      }
    } restore;
    at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
    at::autocast::set_autocast_enabled(at::kCPU, true);
    EXPECT_FALSE(has_signature(signature, args, 7, false)) << "autocast on";
    const auto in_autocast = make_signature(args, 7, false);
    EXPECT_TRUE(has_signature(in_autocast, args, 7, false)) << "the same autocast regions";
    at::autocast::set_autocast_dtype(at::kCPU, at::kHalf);
    EXPECT_FALSE(has_signature(in_autocast, args, 7, false)) << "autocast on, another dtype";
    at::autocast::set_autocast_enabled(at::kCPU, false);
    EXPECT_FALSE(has_signature(in_autocast, args, 7, false)) << "autocast off again";
  }
}

TEST(Signature, ACallWithANonTensorArgumentIsNeverMatched) {
  torch::manual_seed(8);
  const std::vector<c10::IValue> args = {torch::randn({3, 4}), 3};
  const auto signature = make_signature(args, 7, false);
  EXPECT_TRUE(make_signature(args, 7, false) == signature);
  EXPECT_FALSE(signature_is_repeatable(signature)) << "the engine keeps no such signature as its last hit";
  EXPECT_TRUE(signature_is_repeatable(make_signature({torch::randn({3, 4})}, 7, false)));
  EXPECT_FALSE(has_signature(signature, args, 7, false));
  EXPECT_FALSE(has_signature(signature, {torch::randn({3, 4}), at::Tensor()}, 7, false)) << "an undefined tensor";
}

}  // namespace
}  // namespace zenith
