#include "capture/tracer_capture.h"

#include <set>
#include <unordered_set>

#include <ATen/TracerMode.h>
#include <ATen/autocast_mode.h>
#include <ATen/record_function.h>
#include <fmt/format.h>
#include <torch/csrc/jit/frontend/tracer.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/csrc/jit/passes/remove_mutation.h>

#include "capture/autocast_inner_casts.h"
#include "capture/promoting_writes.h"
#include "capture/torchscript_import.h"
#include "zenith/error.h"

namespace zenith::capture {
namespace {

// Whether an in-place op may become its functional form: not when a tensor it reads has another
// dtype than the one it writes. In place, ATen computes in the promoted dtype and stores in the
// written tensor's; the functional form would return the promoted dtype (a bfloat16 matrix
// product's result plus a float32 bias, as LibTorch's linear adds it in place under autocast).
// Such ops stay in place here; capture/promoting_writes.h makes the private ones functional (with
// a cast back where the other operand promoted the computation).
bool keeps_its_dtype(const torch::jit::Node* node) {
  if (node->outputs().size() != 1) return true;  // no single written tensor to compare with
  const auto written = node->output()->type()->cast<c10::TensorType>();
  if (!written || !written->scalarType()) return false;
  for (const auto* input : node->inputs()) {
    const auto type = input->type()->cast<c10::TensorType>();
    if (!type) continue;
    if (!type->scalarType() || *type->scalarType() != *written->scalarType()) return false;
  }
  return true;
}

// Ops that copy tensor data into a C++ value (`.item()`, `at::equal`). The tracer records none of
// them, yet the forward may branch or size tensors on the value: such a trace holds only for the
// values read. A thread-local observer on the dispatcher sees them.
bool reads_data_into_cpp(const char* op) {
  static const std::set<std::string> ops = {"aten::item", "aten::_local_scalar_dense", "aten::is_nonzero",
                                            "aten::equal"};
  return ops.count(op) > 0;
}

// What the tracer saw `tensor` computed from. A tensor computed from constants alone (no graph input,
// no random op among its ancestors) has a value that follows from the call's signature (sizes
// become constants in a trace), so reading it into C++ is evaluating it at capture, as
// TorchScript's `aten::Int(prim::NumToTensor(aten::size(x)))` does.
struct Dependence {
  std::string blocker;      // why a read of it cannot be compiled at all (random numbers), or empty
  std::vector<int> inputs;  // graph inputs among its ancestors, in graph input order
};

Dependence dependence_of(const at::Tensor& tensor) {
  auto state = torch::jit::tracer::getTracingState();
  if (!state || !tensor.defined() || !state->hasValue(tensor)) return {"a tensor the tracer never saw computed", {}};
  const torch::jit::Value* read = state->getValue(tensor);
  std::vector<const torch::jit::Value*> pending{read};
  std::unordered_set<const torch::jit::Node*> seen;
  std::set<int> inputs;
  while (!pending.empty()) {
    const auto* value = pending.back();
    pending.pop_back();
    const auto* node = value->node();
    if (node->kind() == c10::prim::Param) {
      inputs.insert(static_cast<int>(value->offset()));
      continue;
    }
    if (!seen.insert(node).second) continue;
    if (node->isNondeterministic()) return {std::string("random numbers (") + node->kind().toQualString() + ")", {}};
    for (const auto* input : node->inputs()) pending.push_back(input);
  }
  return {"", std::vector<int>(inputs.begin(), inputs.end())};
}

// A read of a tensor computed from graph inputs: where in the trace it is, and a copy of its value.
struct GuardedRead {
  std::string op;
  at::Tensor read;  // the forward's tensor, which the trace returns as an extra output
  at::Tensor expected;
  std::vector<int> inputs;
};

class DataReadDetector {
 public:
  DataReadDetector() {
    reads() = {};
    handle_ = at::addThreadLocalCallback(at::RecordFunctionCallback(&DataReadDetector::on_op)
                                             .needsInputs(true)
                                             .scopes({at::RecordScope::FUNCTION}));
  }
  ~DataReadDetector() {
    at::removeCallback(handle_);
    reads() = {};  // the forward's tensors it read are not kept past the capture
  }
  DataReadDetector(const DataReadDetector&) = delete;
  DataReadDetector& operator=(const DataReadDetector&) = delete;

  /// The first op since construction that read data no plan can check (random numbers, a tensor
  /// the tracer did not see, a large tensor), and why; or empty.
  std::string first_unseen() const { return reads().unseen; }
  /// The ops that read values computed from constants alone, in order (`item` and the
  /// `_local_scalar_dense` it calls count once).
  std::vector<std::string> from_constants() const { return reads().from_constants; }
  /// The reads of tensors computed from graph inputs, in order.
  std::vector<GuardedRead> guarded() const { return reads().guarded; }

 private:
  struct Reads {
    std::string unseen;
    std::vector<std::string> from_constants;
    std::vector<GuardedRead> guarded;
    const void* last_tensor = nullptr;  // item's own _local_scalar_dense reads the same tensor
  };
  static Reads& reads() {
    thread_local Reads state;
    return state;
  }
  static std::unique_ptr<at::ObserverContext> on_op(const at::RecordFunction& fn) {
    auto& state = reads();
    if (!state.unseen.empty() || !reads_data_into_cpp(fn.name())) return nullptr;
    const void* first = nullptr;
    bool from_constants = true;
    for (const auto& input : fn.inputs()) {
      if (!input.isTensor()) continue;
      const auto& tensor = input.toTensor();
      if (!first) first = tensor.unsafeGetTensorImpl();
      if (first == state.last_tensor && std::string(fn.name()) == "aten::_local_scalar_dense") return nullptr;
      auto dependence = dependence_of(tensor);
      if (!dependence.blocker.empty()) {
        state.unseen = std::string(fn.name()) + " on " + dependence.blocker;
        return nullptr;
      }
      if (dependence.inputs.empty()) continue;
      from_constants = false;
      if (tensor.numel() > kMaxGuardedElements) {
        state.unseen = fmt::format("{} on a tensor of {} elements computed from graph inputs (arguments, parameters "
                                   "or buffers)", fn.name(), tensor.numel());
        return nullptr;
      }
      // Copied outside the trace: the copy is Zenith's, not the forward's.
      at::tracer::impl::NoTracerDispatchMode no_tracer;
      at::NoGradGuard no_grad;
      state.guarded.push_back({fn.name(), tensor, tensor.detach().clone(), dependence.inputs});
    }
    if (from_constants) state.from_constants.emplace_back(fn.name());
    state.last_tensor = first;
    return nullptr;
  }
  at::CallbackHandle handle_;
};

}  // namespace

Capture capture_forward(const detail::ModuleAccess& access, const std::vector<c10::IValue>& args,
                        const std::vector<std::pair<std::string, at::Tensor>>& state) {
  Capture capture;
  torch::jit::Stack trace_inputs;
  std::vector<InputBinding> bindings;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (!args[i].isTensor()) continue;
    capture.tensor_arg_positions.push_back(static_cast<int>(i));
    trace_inputs.push_back(args[i]);
    bindings.push_back({ir::ValueRole::Input, "arg" + std::to_string(i)});
  }
  for (const auto& [name, tensor] : state) {
    trace_inputs.push_back(tensor);
    bindings.push_back({ir::ValueRole::Parameter, name});
  }
  const std::size_t tensor_args = capture.tensor_arg_positions.size();

  DataReadDetector data_reads;
  auto traced = [&](torch::jit::Stack inputs) -> torch::jit::Stack {
    // The tracer hands back the same tensors with trace values attached; put them back in place
    // among the non-tensor arguments.
    std::vector<c10::IValue> call_args = args;
    for (std::size_t k = 0; k < tensor_args; ++k) call_args[capture.tensor_arg_positions[k]] = inputs[k];
    torch::jit::Stack returned{access.trace_forward ? access.trace_forward(call_args) : access.forward(call_args)};
    // Each tensor read into C++ from the call's data becomes an extra output: the plan computes it
    // and checks it.
    for (const auto& read : data_reads.guarded()) returned.emplace_back(read.read);
    return returned;
  };
  auto [tracing_state, outputs] = torch::jit::tracer::trace(
      std::move(trace_inputs), traced, [](const at::Tensor&) { return std::string(); },
      /*strict=*/false, /*force_outplace=*/false);
  capture.result = outputs.front();
  if (auto op = data_reads.first_unseen(); !op.empty()) {
    capture.unsupported = "the forward depends on tensor data the trace cannot see (it called " + op +
                          ", reading it into a C++ value); a plan would hold only for this call's values, so this "
                          "signature runs eagerly";
    return capture;
  }
  capture.reads_from_sizes = data_reads.from_constants();
  auto graph = tracing_state->graph;
  for (auto& read : data_reads.guarded()) capture.value_guards.push_back({read.op, read.expected, read.inputs});
  torch::jit::Inline(*graph);
  // Turn in-place ops on fresh values into their functional forms where that is provably safe;
  // what remains mutates memory the caller can see and runs as written.
  torch::jit::RemoveTensorMutation(graph, keeps_its_dtype);
  torch::jit::EliminateDeadCode(graph);
  try {
    capture.graph = import_torchscript(graph, bindings, capture.value_guards.size());
    functionalize_promoting_writes(capture.graph);
    if (at::autocast::is_autocast_enabled(at::kCPU) || at::autocast::is_autocast_enabled(at::kCUDA)) {
      const auto unfit = make_autocast_inner_casts_explicit(capture.graph);
      if (!unfit.empty()) capture.unsupported = unfit + "; this signature runs eagerly";
    }
  } catch (const Error& error) {
    capture.unsupported = error.what();
  }
  return capture;
}

}  // namespace zenith::capture
