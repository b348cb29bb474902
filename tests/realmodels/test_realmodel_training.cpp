// The real-model suite's models trained through Zenith: each exported model (export_models.py),
// loaded twice as an application would, one copy compiled; on fresh inputs at two shapes, a loss
// over every floating output is differentiated eagerly and through the compiled module, and the
// losses and every parameter's gradient compared. Inference is what the models were traced for
// (dropout and batch norm in evaluation form), so this is fine-tuning as a user of a traced file
// does it: gradients through the traced forward.
//
// Environment: as test_realmodels (ZENITH_REALMODELS_DIR, ZENITH_REALMODELS_ONLY).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <torch/script.h>
#include <torch/torch.h>

#include "common_relative_error.h"
#include "manifest.h"
#include "zenith/compile.h"

namespace zenith {
namespace {

using testing::make_inputs;
using testing::manifest_models;
using testing::ManifestEntry;

// The CPU plugin runs ATen's kernels, forward and backward; the compiled backward sums some
// gradients in another order (one product over flattened rows, a fused reduction), so they agree
// to float32 rounding accumulated over a small network's reductions: 1e-7 per sum, 1e-4 leaves
// three orders of margin that a wrong gradient (off by the size of a term) does not fit in.
constexpr double kTolerance = 1e-4;

// Three calls at the traced shape (the capture, then two plan runs) and two at a second shape
// (training signatures are not symbolic: a capture, then a plan run). Five calls, three compiled.
constexpr int kCalls = 5;
constexpr int kCompiledCalls = 3;

// The models whose training runs eagerly, and why. Each must keep falling back for its reason
// (eager's gradients, checked all the same); one that starts compiling fails here until it is
// taken off the list, so that its compiled gradients are checked from then on.
const std::map<std::string, std::string> kRunsEagerly = {
    // Its relative attention scores, a view of a reshaped einsum, multiplied in place by a mask.
    {"hf_funnel", "aten::mul_.Tensor writes in place a value that needs a gradient"},
    // The key third of a clone of its qkv bias zeroed in place.
    {"tv_swin_v2", "aten::zero_ writes in place a value that needs a gradient"},
};

void floating_outputs(const c10::IValue& value, std::vector<at::Tensor>& out) {
  if (value.isTensor()) {
    if (value.toTensor().is_floating_point()) out.push_back(value.toTensor());
  } else if (value.isGenericDict()) {
    for (const auto& item : value.toGenericDict()) floating_outputs(item.value(), out);
  } else if (value.isTuple() || value.isList()) {
    for (const auto& element : value.isTuple() ? value.toTupleRef().elements().vec() : value.toListRef().vec()) {
      floating_outputs(element, out);
    }
  }
}

// Each floating output weighed by a random tensor of its shape (drawn once per call, the same for
// eager and Zenith), summed: a mean square would not do, as outputs after a final norm (T5's,
// Gemma's) keep their mean square whatever the input, and their gradients would be rounding noise.
class Loss {
 public:
  at::Tensor operator()(const c10::IValue& result) {
    std::vector<at::Tensor> outputs;
    floating_outputs(result, outputs);
    const bool drawing = weights_.empty();
    at::Tensor loss = torch::zeros({}, torch::kFloat);
    for (std::size_t i = 0; i < outputs.size(); ++i) {
      if (drawing) weights_.push_back(torch::randn(outputs[i].sizes(), outputs[i].options().dtype(at::kFloat)));
      if (i >= weights_.size() || weights_[i].sizes() != outputs[i].sizes()) {
        throw std::runtime_error(fmt::format("output {} differs in number or shape from eager's", i));
      }
      loss = loss + (outputs[i].to(at::kFloat) * weights_[i]).sum();
    }
    return loss;
  }

 private:
  std::vector<at::Tensor> weights_;
};

// A gradient that is zero in exact arithmetic (a key projection's bias: softmax is the same for
// every shift of all keys) is rounding noise in both, which no relative measure compares. Each
// parameter's difference is taken relative to its own largest gradient or to this fraction of the
// model's largest one, whichever is larger.
constexpr double kGradientFloor = 1e-3;

double gradient_error(const at::Tensor& got, const at::Tensor& want, double model_scale) {
  if (!at::equal(got.isfinite(), want.isfinite())) return INFINITY;
  const double scale = std::max(want.abs().max().item<double>(), kGradientFloor * model_scale);
  return scale == 0 ? 0 : (got - want).abs().max().item<double>() / scale;
}

struct Model {
  torch::jit::Module module;
  std::vector<std::pair<std::string, at::Tensor>> parameters;
};

Model load(const nlohmann::json& entry, const std::string& dir, const at::Device& device) {
  const auto file = dir + "/" + entry.at("file").get<std::string>();
  Model model{entry.value("load_as_saved", false) ? torch::jit::load(file) : torch::jit::load(file, device), {}};
  model.module.eval();
  for (const auto& parameter : model.module.named_parameters(/*recurse=*/true)) {
    parameter.value.requires_grad_(true);
    model.parameters.emplace_back(parameter.name, parameter.value);
  }
  return model;
}

void zero_gradients(const Model& model) {
  for (const auto& [name, parameter] : model.parameters) {
    if (parameter.grad().defined()) parameter.mutable_grad() = at::Tensor();
  }
}

TEST(RealModelTrainingSuite, ManifestNamesModels) {
  const char* dir = std::getenv("ZENITH_REALMODELS_DIR");
  ASSERT_NE(dir, nullptr) << "set ZENITH_REALMODELS_DIR to the folder of tests/realmodels/export_models.py";
  EXPECT_FALSE(manifest_models().empty()) << "no model of " << dir << "/manifest.json matched ZENITH_REALMODELS_ONLY";
}

class RealModelTraining : public ::testing::TestWithParam<ManifestEntry> {};

TEST_P(RealModelTraining, GradientsMatchEagerOnFreshInputs) {
  const auto& entry = GetParam().json;
  const at::Device device(entry.at("device").get<std::string>());
  if (!device.is_cpu()) GTEST_SKIP() << "the CUDA sets are checked in inference only";
  ASSERT_FALSE(entry.contains("export_error"))
      << entry.at("name").get<std::string>() << " did not export: " << entry.at("export_error").get<std::string>();
  const std::string name = entry.at("name");
  torch::manual_seed(std::hash<std::string>{}(name) % 100000);
  auto eager = load(entry, GetParam().dir, device);
  auto compiled = load(entry, GetParam().dir, device);
  ASSERT_FALSE(eager.parameters.empty()) << name;
  CompileOptions options;
  options.name = name;
  auto fast = compile(compiled.module, options);

  std::vector<at::Tensor> first_gradients;
  double sensitivity = INFINITY;
  for (int call = 0; call < kCalls; ++call) {
    SCOPED_TRACE(fmt::format("{}, call {}", name, call));
    const auto inputs = make_inputs(entry.at(call < 3 ? "inputs" : "second_inputs"), device, at::kFloat);
    zero_gradients(eager);
    zero_gradients(compiled);
    Loss loss;
    auto want_loss = loss(eager.module.forward(inputs));
    try {
      want_loss.backward();
    } catch (const c10::Error& error) {
      // torchvision's ViT traced for inference calls _native_multi_head_attention, which PyTorch
      // itself cannot differentiate.
      GTEST_SKIP() << name << ": eager PyTorch cannot differentiate this trace: " << error.what_without_backtrace();
    }
    auto got_loss = loss(fast(inputs));
    ASSERT_TRUE(got_loss.requires_grad()) << "the compiled module's outputs carry no gradient";
    got_loss.backward();
    EXPECT_LE(testing::relative_error(got_loss.detach(), want_loss.detach()), kTolerance);
    double model_scale = 0;
    for (const auto& [parameter_name, want] : eager.parameters) {
      if (want.grad().defined()) model_scale = std::max(model_scale, want.grad().abs().max().item<double>());
    }
    int compared = 0;
    std::vector<at::Tensor> gradients;
    for (std::size_t i = 0; i < eager.parameters.size(); ++i) {
      const auto& [parameter_name, want] = eager.parameters[i];
      const auto& got = compiled.parameters[i].second;
      ASSERT_EQ(compiled.parameters[i].first, parameter_name);
      if (!want.grad().defined()) {
        EXPECT_FALSE(got.grad().defined() && got.grad().abs().max().item<double>() > 0)
            << parameter_name << " has a gradient where eager's has none";
        gradients.emplace_back();
        continue;
      }
      ASSERT_TRUE(got.grad().defined()) << parameter_name << " has no gradient";
      EXPECT_LE(gradient_error(got.grad(), want.grad(), model_scale), kTolerance)
          << parameter_name << ": largest gradient " << want.grad().abs().max().item<double>() << ", the model's "
          << model_scale;
      gradients.push_back(want.grad().clone());
      ++compared;
    }
    EXPECT_GT(compared, 0);
    if (call == 0) first_gradients = gradients;
    if (call == 1) {
      // A stale (remembered) gradient would be off by about this much.
      sensitivity = 0;
      for (std::size_t i = 0; i < gradients.size(); ++i) {
        if (!gradients[i].defined()) continue;
        sensitivity = std::max(sensitivity, gradient_error(gradients[i], first_gradients[i], model_scale));
      }
    }
  }
  EXPECT_GT(sensitivity, 2 * kTolerance) << name << ": two inputs' gradients differ too little to show a stale one";
  const auto stats = fast.stats();
  if (const auto known = kRunsEagerly.find(name); known != kRunsEagerly.end()) {
    EXPECT_EQ(stats.eager_calls, kCalls) << name << " is listed as running eagerly";
    EXPECT_NE(fast.report().fallback_reason.find(known->second), std::string::npos)
        << name << " ran eagerly for another reason: " << fast.report().fallback_reason;
  } else {
    EXPECT_EQ(stats.eager_calls, 0) << name << " ran eagerly: " << fast.report().fallback_reason;
    EXPECT_EQ(stats.training_calls, kCompiledCalls) << name;
  }
  std::printf("%s: %lld training calls, %lld eager, %lld captures; sensitivity %.2e\n", name.c_str(),
              static_cast<long long>(stats.training_calls), static_cast<long long>(stats.eager_calls),
              static_cast<long long>(stats.misses), sensitivity);
}

std::string test_name(const ::testing::TestParamInfo<ManifestEntry>& info) {
  return info.param.json.at("name").get<std::string>();
}

INSTANTIATE_TEST_SUITE_P(Suite, RealModelTraining, ::testing::ValuesIn(manifest_models()), test_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(RealModelTraining);

}  // namespace
}  // namespace zenith
