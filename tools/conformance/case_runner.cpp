#include "conformance/case_runner.h"

#include <cmath>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "common/error_text.h"
#include "common/random_tensors.h"
#include "common/tensor_compare.h"
#include "core/dlpack_view.h"
#include "runtime/executor.h"
#include "core/graph_json.h"
#include "zenith/error.h"

namespace zenith::conformance {
namespace {

// Backend::query folds an error status into its reason text behind this prefix.
constexpr const char* kQueryFailed = "query failed: ";

const tools::Tolerance kTolerance{1e-5, 1e-5};

// Each case launches one compiled kernel on this many draws of its inputs: a kernel must compute
// at every launch, and one that repeated its first launch's results would pass a single draw.
constexpr int kDraws = 2;

// The generator's seed for draw `draw` of a run with `seed`: draw 0 is `seed` itself, as it was
// before cases had several draws; later draws are offset by the golden ratio's 64-bit fraction.
std::uint64_t draw_seed(std::uint64_t seed, int draw) {
  return seed + static_cast<std::uint64_t>(draw) * 0x9e3779b97f4a7c15ULL;
}

std::vector<at::Tensor> random_inputs(const ir::Graph& group, std::uint64_t seed) {
  at::manual_seed(seed);
  std::vector<at::Tensor> inputs;
  for (int id : group.inputs) inputs.push_back(tools::random_tensor(group.value(id).type));
  return inputs;
}

// " (input draw N of M)" after a problem found on a draw after the first, else nothing.
std::string on_draw(int draw) {
  return draw == 0 ? "" : fmt::format(" (input draw {} of {}: the kernel's later launch)", draw + 1, kDraws);
}

at::Tensor poisoned_output(const ir::TensorType& type) {
  auto tensor = at::empty_strided(type.sizes, type.strides, at::TensorOptions().dtype(type.dtype).device(type.device));
  if (c10::isFloatingType(type.dtype)) tensor.fill_(std::numeric_limits<double>::quiet_NaN());
  else tensor.fill_(0x5a);
  return tensor;
}

std::vector<DLTensor> views_of(const std::vector<at::Tensor>& tensors) {
  std::vector<DLTensor> views;
  for (const auto& tensor : tensors) views.push_back(borrow_dlpack(tensor));
  return views;
}

// Launches `kernel` (of `group`) on `backend`; returns its outputs or throws zenith::Error.
std::vector<at::Tensor> run_on(const Backend& backend, const Kernel& kernel, const ir::Graph& group,
                               const std::vector<at::Tensor>& inputs) {
  std::vector<at::Tensor> outputs;
  for (int id : group.outputs) outputs.push_back(poisoned_output(group.value(id).type));
  backend.launch(kernel, views_of(inputs), views_of(outputs), nullptr);
  return outputs;
}

bool overlaps(const at::Tensor& a, const at::Tensor& b) {
  if (a.numel() == 0 || b.numel() == 0) return false;
  const auto* a_begin = static_cast<const char*>(a.storage().data());
  const auto* b_begin = static_cast<const char*>(b.storage().data());
  return a_begin < b_begin + b.storage().nbytes() && b_begin < a_begin + a.storage().nbytes();
}

// As run_on, asking the kernel to hand back every non-empty output in its own memory (ABI 1.4).
// Null when its compile did not offer that (zn_compile_args.provides_outputs). Throws
// zenith::Error when a handed-back output has the wrong dtype, device or sizes, or shares memory
// with an input or another output.
std::optional<std::vector<at::Tensor>> run_handing_back(const Backend& backend, const Kernel& kernel,
                                                        const ir::Graph& group, const std::vector<at::Tensor>& inputs) {
  if (!kernel.provides_outputs()) return std::nullopt;
  std::vector<at::Tensor> outputs(group.outputs.size());
  std::vector<DLTensor> views;
  for (std::size_t o = 0; o < group.outputs.size(); ++o) {
    const auto& type = group.value(group.outputs[o]).type;
    if (type.numel() == 0) {
      outputs[o] = poisoned_output(type);
      views.push_back(borrow_dlpack(outputs[o]));
    } else {
      views.push_back(describe_dlpack(type));
    }
  }
  std::vector<DLManagedTensor*> provided(views.size(), nullptr);
  backend.launch(kernel, views_of(inputs), views, nullptr, &provided);
  std::vector<at::Tensor> adopted(provided.size());  // all of them first: none may leak on a throw
  try {
    for (std::size_t o = 0; o < provided.size(); ++o) {
      if (provided[o] != nullptr) adopted[o] = adopt_dlpack(std::exchange(provided[o], nullptr));
    }
  } catch (...) {
    release_dlpack(provided);
    throw;
  }
  for (std::size_t o = 0; o < outputs.size(); ++o) {
    if (outputs[o].defined()) continue;
    if (!adopted[o].defined()) throw Error(fmt::format("output {} was asked for and not handed back", o));
    outputs[o] = conform_output(adopted[o], group.value(group.outputs[o]).type, backend.name(), o);
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      if (overlaps(adopted[o], inputs[i])) throw Error(fmt::format("handed-back output {} shares memory with input {}", o, i));
    }
    for (std::size_t k = 0; k < o; ++k) {
      if (adopted[k].defined() && overlaps(adopted[o], adopted[k])) {
        throw Error(fmt::format("handed-back outputs {} and {} share memory", k, o));
      }
    }
  }
  return outputs;
}

CaseResult declined(const Backend& plugin, const std::string& group_json, const std::string& reason) {
  try {
    plugin.compile(group_json);
  } catch (const std::exception&) {
    return {Outcome::Declined, reason};
  }
  return {Outcome::Fail, "declined the group in query (" + reason + "), yet compile returned a kernel for it"};
}

// Empty when every output matches, else the first problem.
std::string compare_outputs(const std::vector<at::Tensor>& actual, const std::vector<at::Tensor>& expected) {
  for (std::size_t o = 0; o < expected.size(); ++o) {
    auto result = tools::compare_tensors(actual[o], expected[o], kTolerance);
    if (result.matches) continue;
    if (!result.problem.empty()) return fmt::format("output {}: {}", o, result.problem);
    if (std::isnan(result.max_abs_diff)) {
      return fmt::format("output {}: NaN where the reference has a number (an element the kernel never wrote?)", o);
    }
    return fmt::format("output {}: max abs error {:g} ({})", o, result.max_abs_diff, tools::describe(kTolerance));
  }
  return "";
}

std::string inputs_changed(const std::vector<at::Tensor>& before, const std::vector<at::Tensor>& after) {
  for (std::size_t i = 0; i < before.size(); ++i) {
    if (!at::equal(before[i], after[i])) return fmt::format("the kernel wrote into input {}", i);
  }
  return "";
}

CaseResult run_claimed(const Backend& plugin, const Backend& reference, const ir::Graph& group,
                       const std::string& group_json, std::uint64_t seed) {
  // One kernel of each plugin, launched on every draw.
  std::shared_ptr<Kernel> reference_kernel;
  std::vector<std::vector<at::Tensor>> expected(kDraws);
  try {
    reference_kernel = reference.compile(group_json);
    for (int draw = 0; draw < kDraws; ++draw) {
      expected[draw] = run_on(reference, *reference_kernel, group, random_inputs(group, draw_seed(seed, draw)));
    }
  } catch (const std::exception& e) {
    return {Outcome::Skipped, "the reference could not run it: " + tools::error_text(e)};
  }
  std::shared_ptr<Kernel> kernel;
  try {
    kernel = plugin.compile(group_json);
  } catch (const std::exception& e) {
    return {Outcome::Fail, "claimed the group, then: " + tools::error_text(e)};
  }
  for (int draw = 0; draw < kDraws; ++draw) {
    auto inputs = random_inputs(group, draw_seed(seed, draw));
    std::vector<at::Tensor> actual;
    try {
      actual = run_on(plugin, *kernel, group, inputs);
    } catch (const std::exception& e) {
      return {Outcome::Fail, "claimed the group, then: " + tools::error_text(e) + on_draw(draw)};
    }
    auto problem = compare_outputs(actual, expected[draw]);
    if (problem.empty()) problem = inputs_changed(random_inputs(group, draw_seed(seed, draw)), inputs);
    if (!problem.empty()) return {Outcome::Fail, problem + on_draw(draw)};
  }
  // Again with the outputs handed back, where the kernel offers that.
  for (int draw = 0; draw < kDraws; ++draw) {
    auto inputs = random_inputs(group, draw_seed(seed, draw));
    std::string problem;
    try {
      auto handed = run_handing_back(plugin, *kernel, group, inputs);
      if (!handed) return {Outcome::Pass, ""};
      problem = compare_outputs(*handed, expected[draw]);
      if (problem.empty()) problem = inputs_changed(random_inputs(group, draw_seed(seed, draw)), inputs);
    } catch (const std::exception& e) {
      problem = tools::error_text(e);
    }
    if (!problem.empty()) {
      return {Outcome::Fail, "with outputs handed back (zn_launch_args.provided): " + problem + on_draw(draw)};
    }
  }
  return {Outcome::Pass, ""};
}

}  // namespace

std::string query_refusal(const Backend& plugin, const std::string& group_json, bool& failed) {
  auto reason = plugin.query(group_json);
  failed = false;
  if (!reason) return "";
  bool is_status = reason->rfind(kQueryFailed, 0) == 0;
  failed = is_status && reason->rfind(std::string(kQueryFailed) + "UNSUPPORTED", 0) != 0;
  return reason->empty() ? "declined without a reason" : *reason;
}

CaseResult run_case(const Backend& plugin, const Backend& reference, const ir::Graph& group, std::uint64_t seed) {
  auto group_json = ir::to_json(group, ir::GraphKind::Group).dump();
  bool failed = false;
  auto refusal = query_refusal(plugin, group_json, failed);
  if (failed) return {Outcome::Fail, "query of a well-formed group returned an error: " + refusal};
  if (!refusal.empty()) return declined(plugin, group_json, refusal);
  return run_claimed(plugin, reference, group, group_json, seed);
}

}  // namespace zenith::conformance
