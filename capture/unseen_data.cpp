#include "capture/unseen_data.h"

#include <algorithm>
#include <optional>
#include <set>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <c10/util/Exception.h>
#include <fmt/format.h>

#include "capture/random_state_guard.h"
#include "core/exception_message.h"
#include "core/op_schema.h"
#include "passes/effects.h"

namespace zenith::capture {
namespace {

using State = std::vector<std::pair<std::string, at::Tensor>>;

// Copies of the parameters and buffers the forward writes in place (batch norm's running
// statistics, counters), written back on destruction.
class WrittenStateGuard {
 public:
  WrittenStateGuard(const ir::Graph& graph, const State& state) {
    auto effects = passes::analyse_effects(graph);
    const std::size_t first_state = graph.inputs.size() - state.size();
    for (std::size_t k = first_state; k < graph.inputs.size(); ++k) {
      if (!effects.value_mutable[graph.inputs[k]]) continue;
      const auto& tensor = state[k - first_state].second;
      saved_.emplace_back(tensor, tensor.detach().clone());
    }
  }
  ~WrittenStateGuard() {
    at::NoGradGuard no_grad;
    for (auto& [tensor, copy] : saved_) tensor.detach().copy_(copy);
  }
  WrittenStateGuard(const WrittenStateGuard&) = delete;
  WrittenStateGuard& operator=(const WrittenStateGuard&) = delete;

 private:
  std::vector<std::pair<at::Tensor, at::Tensor>> saved_;
};

std::vector<at::Device> devices_of(const std::vector<c10::IValue>& args, const State& state) {
  std::vector<at::Device> devices{at::Device(at::kCPU)};
  auto add = [&](const at::Tensor& tensor) {
    if (!tensor.is_cuda()) return;  // the CPU is there already; other devices have no generator to keep
    if (std::find(devices.begin(), devices.end(), tensor.device()) == devices.end()) devices.push_back(tensor.device());
  };
  for (const auto& arg : args) {
    if (arg.isTensor()) add(arg.toTensor());
  }
  for (const auto& item : state) add(item.second);
  return devices;
}

bool same_values(const at::Tensor& a, const at::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes() || a.device() != b.device()) return false;
  if (a.is_floating_point() || a.is_complex()) return at::allclose(a, b, /*rtol=*/0, /*atol=*/0, /*equal_nan=*/true);
  return at::equal(a, b);
}

std::string describe_constant(const ir::Graph& graph, int id) {
  const auto& type = graph.value(id).type;
  std::string text = fmt::format("%{} ({})", id, type.to_string());
  for (std::size_t n = 0; n < graph.nodes.size(); ++n) {
    auto inputs = graph.nodes[n].input_ids();
    if (std::find(inputs.begin(), inputs.end(), id) != inputs.end()) {
      return text + fmt::format(", read by {} at node {}", graph.nodes[n].qualified_name(), n);
    }
  }
  return text + ", returned by forward";
}

// Ops whose `self` argument contributes its sizes, dtype and device but not its values; the
// functional forms RemoveTensorMutation gives `fill_`, `zero_` and `copy_` among them.
bool ignores_self_values(const std::string& op) {
  static const std::set<std::string> ops = {
      "aten::fill",      "aten::zero",     "aten::copy",          "aten::empty_like",    "aten::zeros_like",
      "aten::ones_like", "aten::full_like", "aten::rand_like",    "aten::randn_like",    "aten::randint_like",
      "aten::new_empty", "aten::new_zeros", "aten::new_ones",     "aten::new_full",      "aten::new_empty_strided"};
  return ops.count(op) > 0;
}

bool makes_uninitialized(const std::string& op) {
  return op == "aten::empty" || op == "aten::empty_like" || op == "aten::empty_strided" || op == "aten::new_empty" ||
         op == "aten::new_empty_strided";
}

// What node `n` does with the values of `tracked` (one uninitialized allocation and its views).
enum class Use { None, Ignores, Views, Writes, Reads };

Use use_of(const ir::Node& node, const std::set<int>& tracked) {
  auto facts = ir::alias_facts(node);
  for (int id : facts.mutated_inputs) {
    if (tracked.count(id)) return Use::Writes;
  }
  bool uses = false, only_self = true;
  for (const auto& argument : node.args) {
    std::vector<int> ids;
    if (const auto* ref = std::get_if<ir::ValueRef>(&argument.value)) ids.push_back(ref->id);
    if (const auto* list = std::get_if<ir::ValueListRef>(&argument.value)) {
      for (const auto& id : list->ids) {
        if (id) ids.push_back(*id);
      }
    }
    for (int id : ids) {
      if (!tracked.count(id)) continue;
      uses = true;
      only_self &= argument.name == "self";
    }
  }
  if (!uses) return Use::None;
  if (facts.is_view) return Use::Views;
  if (only_self && ignores_self_values(node.op)) return Use::Ignores;
  return Use::Reads;
}

}  // namespace

std::string uninitialized_read(const ir::Graph& graph) {
  for (std::size_t made = 0; made < graph.nodes.size(); ++made) {
    if (!makes_uninitialized(graph.nodes[made].op)) continue;
    std::set<int> tracked(graph.nodes[made].outputs.begin(), graph.nodes[made].outputs.end());
    std::string reader;
    for (std::size_t n = made + 1; n < graph.nodes.size() && reader.empty(); ++n) {
      const auto& node = graph.nodes[n];
      switch (use_of(node, tracked)) {
        case Use::Writes: tracked.clear(); break;
        case Use::Views: tracked.insert(node.outputs.begin(), node.outputs.end()); break;
        case Use::Reads: reader = fmt::format("read by {} at node {}", node.qualified_name(), n); break;
        case Use::None:
        case Use::Ignores: break;
      }
      if (tracked.empty()) break;
    }
    if (reader.empty()) {
      for (int out : graph.outputs) {
        if (tracked.count(out)) reader = "returned by forward";
      }
    }
    if (!reader.empty()) {
      return fmt::format("the tensor made by {} at node {} is {} before anything the tracer saw wrote it: the forward "
                         "filled it where the tracer cannot see (through data_ptr() or an accessor), and a plan would "
                         "read uninitialized memory; give that computation a traceable ATen form to compile it",
                         graph.nodes[made].qualified_name(), made, reader);
    }
  }
  return "";
}

std::string changed_constant(const ir::Graph& first, const ir::Graph& second) {
  const std::size_t nodes = std::min(first.nodes.size(), second.nodes.size());
  for (std::size_t n = 0; n < nodes; ++n) {
    if (first.nodes[n].qualified_name() != second.nodes[n].qualified_name()) {
      return fmt::format("the forward ran other ops for other argument values (node {}: {} here, {} there), so its "
                         "trace holds for this call's values only",
                         n, first.nodes[n].qualified_name(), second.nodes[n].qualified_name());
    }
  }
  // Same sizes, other values: every argument must be the same too. One that differs is a value read
  // into C++ from data (a count, a threshold) that the trace baked in.
  for (std::size_t n = 0; n < nodes; ++n) {
    const auto& a = first.nodes[n].args;
    const auto& b = second.nodes[n].args;
    for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
      if (a[i].value == b[i].value) continue;
      return fmt::format("the forward passed other arguments for other argument values (node {}, {}: {} here, {} "
                         "there): it read tensor data into a C++ value the trace holds as a constant, so a plan would "
                         "hold for this call's values only",
                         n, first.nodes[n].qualified_name(), a[i].to_string(), b[i].to_string());
    }
  }
  if (first.nodes.size() != second.nodes.size()) {
    return fmt::format("the forward ran {} ops here and {} for other argument values, so its trace holds for this "
                       "call's values only",
                       first.nodes.size(), second.nodes.size());
  }
  for (const auto& [id, tensor] : first.constants) {
    auto other = second.constants.find(id);
    if (other != second.constants.end() && same_values(tensor, other->second)) continue;
    return fmt::format("the trace holds a tensor computed where the tracer could not see it, {}: it changed when the "
                       "arguments changed, so a plan would return this call's values for every input. It comes from "
                       "an op that bypasses the dispatcher (a custom or fused kernel) or from data written through "
                       "data_ptr() or an accessor; give that computation a traceable ATen form to compile it",
                       describe_constant(first, id));
  }
  return "";
}

at::Tensor perturbed_copy(const at::Tensor& tensor, std::uint64_t seed) {
  at::NoGradGuard no_grad;
  auto source = tensor.detach();
  auto copy = at::empty_like(source);
  if (source.numel() > 0) {
    // Drawn on the CPU from a private generator: the application's random stream is not touched.
    auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
    auto order = at::randperm(source.numel(), generator, at::TensorOptions().dtype(at::kLong));
    auto values = source.reshape(-1).cpu().index_select(0, order);
    if (source.is_floating_point()) {
      // Scaled and shifted too, so that constant tensors (a mask of ones, zeros) change as well.
      auto noise = at::rand({source.numel()}, generator, at::TensorOptions().dtype(at::kDouble)) * 2 - 1;
      values = (values.to(at::kDouble) * (1 + noise / 16) + noise / 64).to(source.scalar_type());
    }
    copy.copy_(values.view(source.sizes()));
  }
  if (tensor.requires_grad()) copy.requires_grad_(true);
  return copy;
}

std::string find_unseen_data(const detail::ModuleAccess& access, const std::vector<c10::IValue>& args,
                             const State& state, const Capture& capture) {
  if (auto why = uninitialized_read(capture.graph); !why.empty()) return why;
  // Tensor constants, and values read into C++ from tensors computed from constants, are what a
  // second capture on other values checks.
  if (capture.graph.constants.empty() && capture.reads_from_sizes.empty() && capture.value_guards.empty()) return "";
  // Arguments a guarded read was computed from keep their values: the trace after the read holds
  // for them alone, and the plan checks the value read. The others must not matter.
  std::set<std::size_t> guarded;
  for (const auto& guard : capture.value_guards) guarded.insert(guard.inputs.begin(), guard.inputs.end());
  std::vector<c10::IValue> perturbed = args;
  std::uint64_t seed = 0x5eed;
  for (std::size_t k = 0; k < capture.tensor_arg_positions.size(); ++k) {
    const int position = capture.tensor_arg_positions[k];
    const auto& tensor = args[position].toTensor();
    // A copy either way: the caller's tensors are never handed to the checking run.
    perturbed[position] = guarded.count(k) ? c10::IValue(tensor.detach().clone()) : perturbed_copy(tensor, seed++);
  }
  std::optional<Capture> second;
  {
    RandomStateGuard random(devices_of(args, state));
    WrittenStateGuard written(capture.graph, state);
    try {
      second = capture_forward(access, perturbed, state);
    } catch (const std::exception& error) {
      return fmt::format("its trace holds {} tensor constants, and the forward raised when run again on perturbed "
                         "arguments to check that they are constants: {}",
                         capture.graph.constants.size(), message_of(error));
    }
  }
  if (!second->unsupported.empty()) return "with perturbed argument values: " + second->unsupported;
  return changed_constant(capture.graph, second->graph);
}

}  // namespace zenith::capture
