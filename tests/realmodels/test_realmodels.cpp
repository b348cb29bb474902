// The real-model suite: Hugging Face transformers and torchvision models as users bring them, built
// with small configs and random weights, traced in Python (tests/realmodels/export_models.py),
// loaded in C++, called eagerly first as an application does, then compiled and compared against
// eager on fresh inputs: three calls at the traced sizes (the capture and two plan runs) and two at
// a second shape (another batch, another sequence length).
//
// Eager is ATen's kernels run op by op (capture/torchscript_forward.h), what Zenith traces and must
// match; the module's own forward may run TorchScript's fusion groups on CUDA, whose rounding
// differs (tests/gpu/test_torchvision_cuda.cpp says by how much), so its distance from op-by-op
// eager widens the bound where it is larger. On CUDA, Zenith runs convolutions channels-last, where
// cuDNN's algorithms round otherwise; the distance of op-by-op eager in that layout widens it too.
// On CUDA, where the module runs in float64 ("exact"; the torchvision models and the Hugging Face
// traces that bake no dtype into a cast), Zenith is compared with that instead: a deep network
// with random weights amplifies every rounding (eager's own float16 ResNet-50 is 8% from exact,
// float32 Inception-v3's TF32 convolutions 16%), which no fixed bound around eager separates from
// a wrong value. Zenith must be within twice eager's distance from exact, eager's being the
// farther of its two layouts' (Zenith's is channels-last: with TF32 convolutions, float32
// EfficientNetV2-S's contiguous eager is 0.6% from exact and its channels-last eager 1.2% from
// the contiguous). Either way the bound must stay below half of what another input moves the
// outputs by, or the model's check is inconclusive.
//
// Environment: ZENITH_REALMODELS_DIR (the exporter's folder with manifest.json, required),
// ZENITH_REALMODELS_ONLY (comma-separated model names), ZENITH_REALMODELS_TABLE (a markdown row per
// model is appended there: docs/models.md is made from it), ZENITH_REALMODELS_PROGRESS (each phase
// of each model is appended there as it ends).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>

#include <ATen/Context.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/csrc/jit/passes/tensorexpr_fuser.h>
#include <torch/script.h>
#include <torch/torch.h>

#include "capture/torchscript_forward.h"
#include "common_relative_error.h"
#include "manifest.h"
#include "zenith/compile.h"

namespace zenith {
namespace {

using testing::make_inputs;
using testing::manifest_models;
using testing::ManifestEntry;
using Flat = std::map<std::string, at::Tensor>;

// Every tensor of a model's output by its path ("last_hidden_state", "[0]", "[1].logits"): a dict
// must come back a dict with the same keys, a tuple a tuple.
void flatten(const c10::IValue& value, const std::string& path, Flat& flat) {
  if (value.isTensor()) {
    flat[path] = value.toTensor();
  } else if (value.isGenericDict()) {
    for (const auto& item : value.toGenericDict()) {
      flatten(item.value(), path + (path.empty() ? "" : ".") + item.key().toStringRef(), flat);
    }
  } else if (value.isTuple() || value.isList()) {
    auto elements = value.isTuple() ? value.toTupleRef().elements().vec() : value.toListRef().vec();
    for (std::size_t i = 0; i < elements.size(); ++i) flatten(elements[i], fmt::format("{}[{}]", path, i), flat);
  } else {
    flat[path + " (" + value.tagKind() + ")"] = at::Tensor();  // compared by presence
  }
}

Flat flat_outputs(const c10::IValue& value) {
  Flat flat;
  flatten(value, "", flat);
  return flat;
}

// max |got - want| / max |want| over every output; NaN and infinity compared by position.
double difference(const Flat& got, const Flat& want, std::string& mismatch) {
  double worst = 0;
  for (const auto& [path, tensor] : want) {
    auto found = got.find(path);
    if (found == got.end()) {
      mismatch = "no output " + path;
      return INFINITY;
    }
    if (!tensor.defined()) continue;
    const auto& other = found->second;
    if (!other.defined() || other.sizes() != tensor.sizes() || other.scalar_type() != tensor.scalar_type()) {
      mismatch = fmt::format("output {} has another type", path);
      return INFINITY;
    }
    if (!tensor.is_floating_point()) {
      if (!torch::equal(other, tensor)) return INFINITY;
      continue;
    }
    worst = std::max(worst, testing::relative_error_where_finite(other, tensor));
  }
  if (got.size() != want.size()) {
    mismatch = fmt::format("{} outputs where eager returns {}", got.size(), want.size());
    return INFINITY;
  }
  return worst;
}

// Three calls at the traced shape (the capture and two plan runs), two at a second (a capture, or
// a symbolic plan fitted there) and two at a third (a symbolic plan's instance, where one was fitted).
constexpr int kCalls = 7;

struct Outcome {
  std::string model;
  std::int64_t nodes = 0;
  std::string eager_reason;  // of the first signature that ran eagerly
  double worst = 0;          // over every compared call
  double sensitivity = 0;    // between eager outputs of two inputs
  double fused_gap = 0;      // between the module's own forward and op-by-op eager
  double layout_gap = 0;     // between op-by-op eager channels-last and op-by-op eager
  double eager_exact = -1;   // between op-by-op eager (the farther of its two layouts) and the float64
                             // module (-1: not measured)
  double zenith_exact = -1;  // between Zenith and the float64 module
  double compile_ms = 0;
  double in_kernels = 0;     // fraction of the first plan's non-view nodes in kernels (not graph breaks)
  std::size_t breaks = 0;
  std::string symbolic;      // whether the third shape was served by a symbolic plan, or why not
  std::string placement;     // the first plan's kernel launches and nodes per backend
  std::string mismatch;
  std::string error;
  std::string phases;        // where the test's time went: loading and eager calls, each compiled call
};

// Seconds since `start`, for the phases line: a suite that runs past its time says where.
double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// A phase as it ends, on stderr and appended to $ZENITH_REALMODELS_PROGRESS: a model that runs past
// the suite's time (a killed ctest prints nothing of it) shows where it stopped.
void progress(const std::string& line) {
  std::fprintf(stderr, "[realmodels] %s\n", line.c_str());
  if (const char* path = std::getenv("ZENITH_REALMODELS_PROGRESS")) {
    std::ofstream(path, std::ios::app) << "[realmodels] " << line << "\n" << std::flush;
  }
}

double tolerance(const std::string& dtype, at::Device device) {
  // The CPU plugin runs ATen's own kernels: only constant folding's and reductions' order (thread
  // counts) move results, by a few float32 roundoffs (1.2e-7) at most through a small network.
  if (device.is_cpu()) return 1e-5;
  // CUDA: fused kernels round once where eager rounds after every op (tests/gpu/test_torchvision_cuda.cpp).
  return dtype == "float16" ? 5e-3 : 1e-3;
}

// TorchScript's tensor-expression fuser on or off while one model is checked, as its manifest entry
// asks ("torchscript_fuser": the exporter says which models and why), then as it was.
class TorchScriptFuser {
 public:
  explicit TorchScriptFuser(bool on) : before_(torch::jit::tensorExprFuserEnabled()) { torch::jit::setTensorExprFuserEnabled(on); }
  ~TorchScriptFuser() { torch::jit::setTensorExprFuserEnabled(before_); }
  TorchScriptFuser(const TorchScriptFuser&) = delete;
  TorchScriptFuser& operator=(const TorchScriptFuser&) = delete;

 private:
  const bool before_;
};

// The module as CUDA inference plans lay it out (capture/inference_layout.h): four-dimensional
// weights channels-last, and so the convolutions' inputs. Its op-by-op eager runs cuDNN's
// channels-last algorithms, which sum in another order than the NCHW ones; the traced
// convolutions ask for TF32 (`allow_tf32`, PyTorch's default when they were exported), so they
// differ by TF32 units (2^-11), which a deep network amplifies: 5e-4 at the output of ResNet-18
// and RegNet in Python, 1e-2 in some of this suite. None when the module has no such weight.
std::optional<torch::jit::Module> channels_last_twin(const torch::jit::Module& module) {
  auto twin = module.clone();
  bool any = false;
  for (const auto& parameter : twin.parameters()) {
    if (parameter.dim() != 4) continue;
    parameter.set_data(parameter.contiguous(at::MemoryFormat::ChannelsLast));
    any = true;
  }
  if (!any) return std::nullopt;
  return twin;
}

// The module in float64, run op by op: its outputs are the values eager's and Zenith's rounding
// moves away from. Throws where the module cannot run so (a trace that casts to a fixed dtype meets
// float64 tensors).
std::function<c10::IValue(const std::vector<c10::IValue>&)> exact_forward(const torch::jit::Module& module) {
  auto wide = module.clone();
  wide.to(at::kDouble);
  auto forward = capture::unfused_forward(wide);
  return [forward](const std::vector<c10::IValue>& inputs) {
    std::vector<c10::IValue> widened;
    for (const auto& input : inputs) {
      const bool floating = input.isTensor() && input.toTensor().is_floating_point();
      widened.emplace_back(floating ? c10::IValue(input.toTensor().to(at::kDouble)) : input);
    }
    return forward(widened);
  };
}

// Every floating output in float64, to be compared with the exact module's.
Flat widened(Flat flat) {
  for (auto& [path, tensor] : flat) {
    if (tensor.defined() && tensor.is_floating_point()) tensor = tensor.to(at::kDouble);
  }
  return flat;
}

std::vector<c10::IValue> channels_last(std::vector<c10::IValue> inputs) {
  for (auto& input : inputs) {
    if (input.isTensor() && input.toTensor().dim() == 4) input = input.toTensor().contiguous(at::MemoryFormat::ChannelsLast);
  }
  return inputs;
}

Outcome check_model(const nlohmann::json& entry, const std::string& dir) {
  Outcome outcome;
  const std::string dtype_name = entry.at("dtype");
  outcome.model = entry.at("name").get<std::string>() + " " + dtype_name;
  const at::Device device(entry.at("device").get<std::string>());
  const auto dtype = dtype_name == "float16" ? at::kHalf : at::kFloat;
  torch::manual_seed(std::hash<std::string>{}(outcome.model) % 100000);
  progress(outcome.model + ": loading");
  auto started = std::chrono::steady_clock::now();
  try {
    torch::NoGradGuard no_grad;
    TorchScriptFuser fuser(entry.value("torchscript_fuser", true));
    // Every tensor mapped to the model's device, as an application loading a file for one device
    // does; or, where the exporter says so ("load_as_saved"), each where it was saved (BEiT's
    // trace keeps CPU constants, which its own call needs there).
    const auto file = dir + "/" + entry.at("file").get<std::string>();
    auto module = entry.value("load_as_saved", false) ? torch::jit::load(file) : torch::jit::load(file, device);
    module.eval();
    auto eager = [&](const std::vector<c10::IValue>& inputs) { return module.forward(inputs); };
    // The application's own calls first: on CUDA, TorchScript fuses from the second one.
    auto first = flat_outputs(eager(make_inputs(entry.at("inputs"), device, dtype)));
    for (int call = 0; call < 2; ++call) eager(make_inputs(entry.at("inputs"), device, dtype));
    auto second = flat_outputs(eager(make_inputs(entry.at("inputs"), device, dtype)));
    std::string ignored;
    outcome.sensitivity = difference(second, first, ignored);
    auto op_by_op = capture::unfused_forward(module);
    std::function<c10::IValue(const std::vector<c10::IValue>&)> laid_out_op_by_op;
    std::function<c10::IValue(const std::vector<c10::IValue>&)> exact;
    if (device.is_cuda()) {
      if (auto twin = channels_last_twin(module)) laid_out_op_by_op = capture::unfused_forward(*twin);
      exact = exact_forward(module);
    }
    CompileOptions options;
    options.name = entry.at("name");
    auto fast = compile(module, options);
    outcome.phases = fmt::format("load and 4 eager calls {:.1f} s, calls", seconds_since(started));
    progress(outcome.model + ": " + outcome.phases);
    for (int call = 0; call < kCalls; ++call) {
      const char* which = call < 3 ? "inputs" : call < 5 ? "second_inputs" : "third_inputs";
      auto inputs = make_inputs(entry.at(which), device, dtype);
      auto want = flat_outputs(op_by_op(inputs));
      auto fused = flat_outputs(eager(inputs));
      Flat laid_out;
      if (laid_out_op_by_op) {
        laid_out = flat_outputs(laid_out_op_by_op(channels_last(inputs)));
        outcome.layout_gap = std::max(outcome.layout_gap, difference(laid_out, want, ignored));
      }
      auto called = std::chrono::steady_clock::now();
      auto got = flat_outputs(fast(inputs));
      if (device.is_cuda()) torch::cuda::synchronize();
      const double took = seconds_since(called);
      if (exact) {
        try {
          const auto truth = widened(flat_outputs(exact(inputs)));
          outcome.eager_exact = std::max(outcome.eager_exact, difference(widened(want), truth, ignored));
          if (!laid_out.empty()) {
            outcome.eager_exact = std::max(outcome.eager_exact, difference(widened(laid_out), truth, ignored));
          }
          outcome.zenith_exact = std::max(outcome.zenith_exact, difference(widened(got), truth, ignored));
        } catch (const std::exception& error) {
          progress(fmt::format("{}: no float64 reference ({})", outcome.model, error.what()));
          exact = nullptr;
          outcome.eager_exact = outcome.zenith_exact = -1;
        }
      }
      std::string mismatch;
      const double differs = difference(got, want, mismatch);
      outcome.worst = std::max(outcome.worst, differs);
      outcome.phases += fmt::format(" {:.2f}", took);
      progress(fmt::format("{}: compiled call {} took {:.2f} s, differs from eager by {:.2e}", outcome.model, call,
                           took, differs));
      outcome.fused_gap = std::max(outcome.fused_gap, difference(fused, want, ignored));
      if (!mismatch.empty() && outcome.mismatch.empty()) outcome.mismatch = fmt::format("call {}: {}", call, mismatch);
      auto report = fast.report();
      if (call == 0) {
        outcome.nodes = report.nodes_captured;
        outcome.compile_ms = report.total_ms;
        outcome.breaks = report.graph_breaks.size();
        for (const auto& graph_break : report.graph_breaks) progress(outcome.model + ": graph break " + graph_break);
        outcome.placement = fmt::format("{} launches", report.groups);
        for (const auto& [backend, nodes] : report.nodes_per_backend) {
          outcome.placement += fmt::format(", {} {}", backend, nodes);
        }
        const auto planned = report.nodes_final - report.host_nodes;
        outcome.in_kernels = report.eager_fallback || planned <= 0
                                 ? 0.0
                                 : 1.0 - static_cast<double>(outcome.breaks) / static_cast<double>(planned);
      }
      if (report.eager_fallback && outcome.eager_reason.empty()) {
        outcome.eager_reason = fmt::format("call {}: {}", call, report.fallback_reason);
      }
    }
    if (fast.stats().eager_calls > 0 && outcome.eager_reason.empty()) {
      outcome.eager_reason = fmt::format("{} of {} calls ran eagerly", fast.stats().eager_calls, kCalls);
    }
    outcome.symbolic = fast.stats().instantiations > 0 ? "symbolic" : fast.report().static_reason.empty() ? "exact" : "exact: " + fast.report().static_reason;
    if (device.is_cuda()) torch::cuda::synchronize();
    outcome.phases += fmt::format(" s; {:.1f} s in all", seconds_since(started));
  } catch (const std::exception& error) {
    outcome.error = error.what();
  }
  return outcome;
}

TEST(RealModels, ManifestNamesModels) {
  const char* dir = std::getenv("ZENITH_REALMODELS_DIR");
  ASSERT_NE(dir, nullptr) << "set ZENITH_REALMODELS_DIR to the folder of tests/realmodels/export_models.py";
  ASSERT_TRUE(std::ifstream(std::string(dir) + "/manifest.json")) << "no manifest.json in " << dir;
  EXPECT_FALSE(manifest_models().empty()) << "no model of " << dir << "/manifest.json matched ZENITH_REALMODELS_ONLY";
}

class RealModel : public ::testing::TestWithParam<ManifestEntry> {};

TEST_P(RealModel, CompilesAndMatchesEagerOnFreshInputsAndOtherShapes) {
  const auto& entry = GetParam().json;
  const at::Device device(entry.at("device").get<std::string>());
  if (device.is_cuda() && !torch::cuda::is_available()) GTEST_SKIP() << "the models were exported for CUDA";
  ASSERT_FALSE(entry.contains("export_error"))
      << entry.at("name").get<std::string>() << " did not export: " << entry.at("export_error").get<std::string>();
  // As eager runs them by default on CUDA; the bound covers fused kernels' other rounding order.
  at::globalContext().setAllowTF32CuBLAS(false);
  at::globalContext().setAllowTF32CuDNN(false);
  auto outcome = check_model(entry, GetParam().dir);
  const double tolerated = tolerance(entry.at("dtype"), device);
  EXPECT_TRUE(outcome.error.empty()) << outcome.model << ": " << outcome.error;
  EXPECT_TRUE(outcome.mismatch.empty()) << outcome.model << ": " << outcome.mismatch;
  EXPECT_TRUE(outcome.eager_reason.empty()) << outcome.model << " ran eagerly: " << outcome.eager_reason;
  EXPECT_GE(outcome.in_kernels, 0.95) << outcome.model << ": " << outcome.breaks << " graph breaks";
  double bound = 0;
  if (outcome.eager_exact >= 0) {
    // Zenith as accurate as eager, within twice eager's distance from the float64 module. This
    // implies its distance from eager (at most three times eager's from exact), and is the
    // sharper test where rounding dominates: a stale output is as far from exact as from eager.
    bound = std::max(tolerated, 2 * outcome.eager_exact);
    EXPECT_LE(outcome.zenith_exact, bound) << outcome.model << " is further from the float64 module than twice "
                                           << "eager's distance " << outcome.eager_exact;
  } else {
    bound = std::max({tolerated, 2 * outcome.fused_gap, 2 * outcome.layout_gap});
    EXPECT_LE(outcome.worst, bound) << outcome.model << " differs from eager on fresh inputs";
  }
  // A stale output would be off by about the sensitivity: below the bound, this model's comparison
  // could not show one (the exporter calibrates batch norm so that outputs depend on inputs).
  EXPECT_GT(outcome.sensitivity, 2 * bound) << outcome.model << " is inconclusive: two inputs' outputs differ by "
                                            << outcome.sensitivity << ", too little to show a stale value";
  const std::string row = fmt::format(
      "| {} | {} | {} | {} | {:.1f}% | {} | {:.1e} | {:.1e} | {} | {:.0f} | {} | {} |\n", outcome.model, outcome.nodes,
      outcome.eager_reason.empty() ? "compiled" : "eager", outcome.placement, 100 * outcome.in_kernels, outcome.breaks,
      outcome.worst, outcome.sensitivity,
      outcome.eager_exact < 0 ? std::string("-")
                              : fmt::format("{:.1e} / {:.1e}", outcome.eager_exact, outcome.zenith_exact),
      outcome.compile_ms, outcome.symbolic,
      outcome.error.empty() ? outcome.eager_reason.substr(0, 200) : "ERROR " + outcome.error.substr(0, 200));
  std::printf("%s: %lld nodes, %s, %.1f%% in kernels (%zu graph breaks), worst %.2e (bound %.1e), sensitivity "
              "%.2e, fused gap %.2e, layout gap %.2e, from float64: %s, first call %.0f ms, %s%s%s; %s\n",
              outcome.model.c_str(), static_cast<long long>(outcome.nodes),
              outcome.eager_reason.empty() ? "compiled" : "EAGER", 100 * outcome.in_kernels, outcome.breaks,
              outcome.worst, bound, outcome.sensitivity, outcome.fused_gap, outcome.layout_gap,
              outcome.eager_exact < 0
                  ? "not measured"
                  : fmt::format("eager {:.2e}, Zenith {:.2e}", outcome.eager_exact, outcome.zenith_exact).c_str(),
              outcome.compile_ms,
              outcome.symbolic.c_str(), outcome.eager_reason.empty() ? "" : ": ", outcome.eager_reason.c_str(),
              outcome.phases.c_str());
  std::fflush(stdout);
  // Appended whole in one write: shards running side by side append to the same table.
  if (const char* path = std::getenv("ZENITH_REALMODELS_TABLE")) std::ofstream(path, std::ios::app) << row << std::flush;
}

INSTANTIATE_TEST_SUITE_P(Suite, RealModel, ::testing::ValuesIn(manifest_models()),
                         [](const ::testing::TestParamInfo<ManifestEntry>& info) { return info.param.json.at("name").get<std::string>(); });
// Without ZENITH_REALMODELS_DIR there are none; ManifestNamesModels fails and says why.
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(RealModel);

}  // namespace
}  // namespace zenith
