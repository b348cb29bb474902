#include "capture/backward_capture.h"

#include <algorithm>
#include <optional>

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/core/grad_mode.h>
#include <fmt/format.h>
#include <torch/csrc/jit/frontend/tracer.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/inliner.h>

#include "capture/random_state_guard.h"
#include "capture/torchscript_import.h"
#include "core/interpreter.h"
#include "core/attention_operand_alignment.h"
#include "core/exception_message.h"
#include "core/op_schema.h"
#include "passes/effects.h"
#include "passes/autodiff/derivative_rules.h"
#include "zenith/error.h"

namespace zenith::capture {
namespace {

bool differentiable_dtype(c10::ScalarType dtype) { return at::isFloatingType(dtype) || at::isComplexType(dtype); }

// Which values carry a gradient: those that depend on an input requiring one through ops that pass
// gradients, and lead to an output.
struct GradientFlow {
  std::vector<bool> needs;   // by value id: depends on an input requiring a gradient
  std::vector<bool> active;  // by node: its rule must run
};

GradientFlow analyse_flow(const ir::Graph& forward, const std::vector<bool>& input_requires_grad) {
  GradientFlow flow;
  flow.needs.assign(forward.values.size(), false);
  for (std::size_t i = 0; i < forward.inputs.size(); ++i) {
    const int id = forward.inputs[i];
    flow.needs[id] = input_requires_grad[i] && differentiable_dtype(forward.value(id).type.dtype);
  }
  for (const auto& node : forward.nodes) {
    if (autodiff::blocks_gradient(node)) continue;
    bool any = false;
    for (int in : node.input_ids()) any = any || flow.needs[in];
    for (int out : node.outputs) flow.needs[out] = any && differentiable_dtype(forward.value(out).type.dtype);
  }
  std::vector<bool> useful(forward.values.size(), false);
  for (int out : forward.outputs) useful[out] = flow.needs[out];
  flow.active.assign(forward.nodes.size(), false);
  for (int n = static_cast<int>(forward.nodes.size()) - 1; n >= 0; --n) {
    const auto& node = forward.nodes[n];
    bool leads = false;
    for (int out : node.outputs) leads = leads || (useful[out] && flow.needs[out]);
    if (!leads) continue;
    bool fed = false;
    for (int in : node.input_ids()) {
      if (flow.needs[in]) useful[in] = fed = true;
    }
    flow.active[n] = fed;
  }
  return flow;
}

// Sums a gradient to the value's sizes (undoing broadcasting) with reductions the fusion pass
// knows, then casts it to the value's dtype.
at::Tensor fit_gradient(const at::Tensor& gradient, const ir::TensorType& value) {
  at::Tensor g = gradient;
  const c10::IntArrayRef target(value.sizes);
  const auto lead = g.dim() - static_cast<std::int64_t>(target.size());
  if (lead > 0) {
    std::vector<std::int64_t> dims(static_cast<std::size_t>(lead));
    for (std::int64_t d = 0; d < lead; ++d) dims[d] = d;
    g = g.sum(dims);
  }
  std::vector<std::int64_t> broadcast;
  for (std::int64_t d = 0; d < g.dim(); ++d) {
    if (target[d] == 1 && g.size(d) != 1) broadcast.push_back(d);
  }
  if (!broadcast.empty()) g = g.sum(broadcast, /*keepdim=*/true);
  if (g.sizes() != target) {
    throw Error(fmt::format("autodiff: a gradient of sizes {} does not fit its value of sizes {}", c10::str(g.sizes()),
                            c10::str(target)));
  }
  if (g.scalar_type() != value.dtype) g = g.to(value.dtype);
  return g;
}

class Sink final : public autodiff::GradientSink {
 public:
  Sink(const std::vector<bool>& needs, const std::vector<std::optional<ir::TensorType>>& types,
       std::vector<at::Tensor>& grads)
      : needs_(needs), types_(types), grads_(grads) {}

  void add(const autodiff::RuleCall& call, const char* name, const at::Tensor& gradient) override {
    accumulate(call.input_id(name), gradient);
  }
  void add_element(const autodiff::RuleCall& call, const char* name, std::size_t index,
                   const at::Tensor& gradient) override {
    const auto& list = std::get<ir::ValueListRef>(call.node().arg(name)->value);
    const auto& id = list.ids.at(index);
    accumulate(id ? *id : -1, gradient);
  }
  bool wanted(const autodiff::RuleCall& call, const char* name) const override {
    const int id = call.input_id(name);
    return id >= 0 && needs_[id];
  }

 private:
  void accumulate(int id, const at::Tensor& gradient) {
    if (id < 0 || !needs_[id] || !gradient.defined()) return;
    auto fitted = fit_gradient(gradient, types_.at(static_cast<std::size_t>(id)).value());
    grads_[id] = grads_[id].defined() ? grads_[id] + fitted : fitted;
  }

  const std::vector<bool>& needs_;
  const std::vector<std::optional<ir::TensorType>>& types_;
  std::vector<at::Tensor>& grads_;
};

c10::Device device_of(const std::vector<c10::IValue>& args) {
  for (const auto& arg : args) {
    if (arg.isTensor() && arg.toTensor().defined()) return arg.toTensor().device();
  }
  return c10::Device(c10::kCPU);
}

// Runs an op boxed with the tracer paused and records it in the trace by hand: the generated
// tracer kernels of ATen's backward ops throw on their `bool[3] output_mask` argument, and the
// tracer records an undefined tensor as None, which a plain Tensor argument does not accept.
std::vector<at::Tensor> run_recorded(const std::string& name, const std::string& overload,
                                     std::vector<c10::IValue> args) {
  auto handle = c10::Dispatcher::singleton().findSchema({name, overload});
  if (!handle) throw Error(fmt::format("autodiff: no ATen operator {}.{}", name, overload));
  auto state = torch::jit::tracer::getTracingState();
  torch::jit::Node* node = nullptr;
  if (state) {
    auto& graph = *state->graph;
    node = graph.create(c10::Symbol::fromQualString(name), /*num_outputs=*/0);
    for (const auto& arg : args) {
      if (!arg.isTensor()) {
        node->addInput(graph.insertConstant(arg));
      } else if (arg.toTensor().defined()) {
        node->addInput(torch::jit::tracer::getValueTrace(arg.toTensor()));
      } else {
        // An undefined tensor, as the fused attention backwards take an absent bias: the tracer
        // would record None, which a plain Tensor argument does not accept; AutogradZero is the
        // JIT's undefined tensor (imported as None, handed to the op as an undefined tensor).
        node->addInput(graph.insertNode(graph.createAutogradZero())->output());
      }
    }
    graph.insertNode(node);
  }
  torch::jit::Stack stack(args.begin(), args.end());
  {
    torch::jit::tracer::setTracingState(nullptr);
    struct Resume {
      std::shared_ptr<torch::jit::tracer::TracingState> state;
      ~Resume() { torch::jit::tracer::setTracingState(std::move(state)); }
    } resume{state};
    // As a plan's own call of the op (core/aten_call.cpp): the values here only build the trace,
    // but a fused attention kernel reading them off 16-byte boundaries may end the CUDA context.
    if (reads_attention_operands_aligned(handle->schema())) align_attention_operands(stack);
    handle->callBoxed(stack);
  }
  std::vector<at::Tensor> results;
  for (auto& item : stack) {
    results.push_back(item.isTensor() ? item.toTensor() : at::Tensor());
    if (!node) continue;
    auto* output = node->addOutput();
    if (results.back().defined()) {
      output->inferTypeFrom(results.back());
      torch::jit::tracer::setValueTrace(results.back(), output);
    } else {
      // A result the output mask left out: typed as an empty tensor, which nothing reads and the
      // dispatcher plugins leave alone.
      output->inferTypeFrom(at::empty({0}, at::TensorOptions().device(device_of(args))));
    }
  }
  return results;
}

// Why `node`, which a gradient must cross, cannot be differentiated; empty when it can.
std::string refusal(const ir::Node& node) {
  if (!ir::alias_facts(node).mutated_inputs.empty()) {
    return fmt::format("{} writes in place a value that needs a gradient", node.qualified_name());
  }
  if (autodiff::find_derivative_rule(node) == nullptr) {
    return fmt::format("{} has no derivative rule in Zenith", node.qualified_name());
  }
  return "";
}

}  // namespace

namespace {

// Per value id, the index of the last node in the backward's order (the first in the forward's)
// whose rule may read it: its value can go once that rule has run. -1 where no rule may read it.
std::vector<int> last_backward_reader(const ir::Graph& forward, const std::vector<bool>& active) {
  std::vector<int> last(forward.values.size(), -1);
  for (int n = static_cast<int>(forward.nodes.size()) - 1; n >= 0; --n) {
    if (!active[n]) continue;
    const auto& node = forward.nodes[n];
    for (int id : node.input_ids()) last[id] = n;
    for (int id : node.outputs) last[id] = n;
  }
  return last;
}

// Runs `forward` through `interpret` leaving no trace: the inputs it writes are cloned, the random
// generators of the devices involved restored afterwards.
template <typename Interpret>
auto run_without_trace(const ir::Graph& forward, std::vector<at::Tensor> inputs, Interpret interpret) {
  auto effects = passes::analyse_effects(forward);
  std::vector<c10::Device> devices{c10::Device(c10::kCPU)};
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (effects.value_mutable[forward.inputs[i]]) inputs[i] = inputs[i].detach().clone();
    if (inputs[i].defined() && std::find(devices.begin(), devices.end(), inputs[i].device()) == devices.end()) {
      devices.push_back(inputs[i].device());
    }
  }
  RandomStateGuard generators(devices);
  at::NoGradGuard no_grad;
  return interpret(forward, inputs);
}

}  // namespace

std::vector<at::Tensor> forward_values(const ir::Graph& forward, std::vector<at::Tensor> inputs) {
  return run_without_trace(forward, std::move(inputs), ir::interpret_values);
}

std::vector<std::vector<std::int64_t>> forward_strides(const ir::Graph& forward, std::vector<at::Tensor> inputs) {
  return run_without_trace(forward, std::move(inputs), ir::interpret_strides);
}

ir::TypedRun forward_run_for_backward(const ir::Graph& forward, std::vector<at::Tensor> inputs,
                                      const std::vector<bool>& input_requires_grad) {
  const auto last_reader = last_backward_reader(forward, analyse_flow(forward, input_requires_grad).active);
  // A rule's ops are the same whatever the data of the floating values it reads, and the capture
  // records ops, not data: those are made again, as zeros of the recorded layout, when a rule reads
  // them. Integer and boolean values (indices, masks, targets) steer where ops read and write. By
  // the tensor's dtype: the training rewrite's new results are typed by this run.
  auto keep = [&](int id, const at::Tensor& tensor) {
    return last_reader[static_cast<std::size_t>(id)] >= 0 && !differentiable_dtype(tensor.scalar_type());
  };
  return run_without_trace(forward, std::move(inputs), [&](const ir::Graph& graph, const std::vector<at::Tensor>& in) {
    return ir::interpret_types(graph, in, keep);
  });
}

BackwardCapture capture_backward(const ir::Graph& forward, ir::TypedRun run,
                                 const std::vector<bool>& input_requires_grad) {
  BackwardCapture result;
  auto flow = analyse_flow(forward, input_requires_grad);
  for (int id : forward.outputs) result.differentiable.push_back(flow.needs[id]);
  for (std::size_t n = 0; n < forward.nodes.size(); ++n) {
    if (!flow.active[n]) {
      // A node off the gradient's path may still write in place into a value that carries one (or
      // into a view of it): later reads of that value, and of its base and views, see the write,
      // which rules reading values cannot follow (torchvision's Swin V2 zeroes the key third of a
      // clone of its qkv bias; its gradient there must be 0). Refused like a write on the path.
      for (int id : ir::alias_facts(forward.nodes[n]).mutated_inputs) {
        if (!flow.needs[id]) continue;
        result.unsupported = fmt::format("{} writes in place a value that needs a gradient",
                                         forward.nodes[n].qualified_name());
        result.op = forward.nodes[n].qualified_name();
        return result;
      }
      continue;
    }
    if (auto why = refusal(forward.nodes[n]); !why.empty()) {
      result.unsupported = why;
      result.op = forward.nodes[n].qualified_name();
      return result;
    }
  }

  // Trace inputs: one gradient per differentiable output. The forward values a rule reads become
  // inputs as they are first read, so that the trace holds none of them. Those the run did not keep
  // (floating intermediates, see forward_run_for_backward) are made when first read; each goes once
  // the last rule that may read it has run, and each gradient once its node's rule has taken it.
  // The capture holds about what the forward and the backward each hold at once, not every value.
  auto& values = run.kept;
  const auto& types = run.types;
  values.resize(forward.values.size());
  torch::jit::Stack trace_inputs;
  std::vector<int> gradient_outputs;
  for (std::size_t k = 0; k < forward.outputs.size(); ++k) {
    const int id = forward.outputs[k];
    if (!flow.needs[id]) continue;
    // Contiguous: at run time the incoming gradients are made contiguous to match.
    const auto& type = types.at(static_cast<std::size_t>(id)).value();
    trace_inputs.emplace_back(at::ones(type.sizes, at::TensorOptions().dtype(type.dtype).device(type.device)));
    gradient_outputs.push_back(static_cast<int>(k));
  }
  const auto last_reader = last_backward_reader(forward, flow.active);
  std::vector<bool> released(values.size(), false);
  for (std::size_t id = 0; id < values.size(); ++id) {
    if (last_reader[id] < 0) values[id].reset();
  }
  std::vector<int> value_of_input;  // the forward value of each input after the gradients
  std::vector<int> input_gradients;

  auto differentiate = [&](torch::jit::Stack inputs) -> torch::jit::Stack {
    auto state = torch::jit::tracer::getTracingState();
    std::vector<at::Tensor> grads(values.size());
    for (std::size_t k = 0; k < gradient_outputs.size(); ++k) {
      const int id = forward.outputs[gradient_outputs[k]];
      const auto& incoming = inputs[k].toTensor();
      grads[id] = grads[id].defined() ? grads[id] + incoming : incoming;
    }
    std::vector<bool> is_input(values.size(), false);
    auto value_of = [&](int id) -> const at::Tensor& {
      auto& value = values.at(static_cast<std::size_t>(id));
      const auto& type = types.at(static_cast<std::size_t>(id));
      if (!value.defined() && !released[static_cast<std::size_t>(id)] && last_reader[id] >= 0 && type &&
          differentiable_dtype(type->dtype)) {
        value = at::empty_strided(type->sizes, type->strides,
                                  at::TensorOptions().dtype(type->dtype).device(type->device));
        value.zero_();  // any data would do; zeros keep the capture deterministic
      }
      if (!value.defined()) {
        throw Error(fmt::format("autodiff: a rule read %{}, which the capture no longer holds: no node left to "
                                "differentiate names it (a rule reads its own node's values only)",
                                id));
      }
      if (!is_input[static_cast<std::size_t>(id)]) {
        auto* input = state->graph->addInput(fmt::format("saved_{}", id));
        input->inferTypeFrom(value);
        torch::jit::tracer::setValueTrace(value, input);
        is_input[static_cast<std::size_t>(id)] = true;
        value_of_input.push_back(id);
      }
      return value;
    };
    Sink sink(flow.needs, types, grads);
    for (int n = static_cast<int>(forward.nodes.size()) - 1; n >= 0; --n) {
      if (!flow.active[n]) continue;
      const auto& node = forward.nodes[n];
      std::vector<at::Tensor> outgoing;
      bool any = false;
      for (int out : node.outputs) {
        outgoing.push_back(std::move(grads[out]));  // taken: nothing after this rule adds to it
        any = any || outgoing.back().defined();
      }
      if (any) {
        // A list's pieces (chunk, split, unbind) are equals: their rules take a gradient for any of them.
        if (!outgoing[0].defined() && !node.list_output) {
          throw Error(fmt::format("a gradient reaches a secondary result of {}, which its rule does not take",
                                  node.qualified_name()));
        }
        (*autodiff::find_derivative_rule(node))(autodiff::RuleCall(node, value_of, std::move(outgoing), run_recorded),
                                                sink);
      }
      for (const auto& ids : {node.input_ids(), node.outputs}) {
        for (int id : ids) {
          if (last_reader[id] == n) {
            values[id].reset();
            released[id] = true;
          }
        }
      }
    }
    std::vector<c10::IValue> elements;
    for (std::size_t i = 0; i < forward.inputs.size(); ++i) {
      const auto& grad = grads[forward.inputs[i]];
      if (!grad.defined()) continue;
      elements.emplace_back(grad);
      input_gradients.push_back(static_cast<int>(i));
    }
    return {c10::ivalue::Tuple::create(std::move(elements))};
  };

  std::shared_ptr<torch::jit::tracer::TracingState> state;
  try {
    at::NoGradGuard no_grad;
    state = std::get<0>(torch::jit::tracer::trace(
        std::move(trace_inputs), differentiate, [](const at::Tensor&) { return std::string(); },
        /*strict=*/false, /*force_outplace=*/false));
  } catch (const std::exception& error) {
    result.unsupported = fmt::format("a derivative rule failed: {}", message_of(error));
    return result;
  }
  values.clear();
  auto graph = state->graph;
  torch::jit::Inline(*graph);
  torch::jit::EliminateDeadCode(graph);
  std::vector<InputBinding> bindings;
  for (int k : gradient_outputs) bindings.push_back({ir::ValueRole::Input, fmt::format("grad.{}", k)});
  for (int id : value_of_input) bindings.push_back({ir::ValueRole::Input, fmt::format("saved.{}", id)});
  auto& backward = result.backward;
  backward.graph = import_torchscript(graph, bindings);
  backward.input_gradients = std::move(input_gradients);

  // Keep only the inputs the backward reads: the saved values first, then the gradients.
  std::vector<bool> used(backward.graph.values.size(), false);
  for (const auto& node : backward.graph.nodes)
    for (int id : node.input_ids()) used[id] = true;
  for (int id : backward.graph.outputs) used[id] = true;
  std::vector<int> saved_inputs, gradient_inputs;
  const std::size_t gradient_count = gradient_outputs.size();
  for (std::size_t k = 0; k < backward.graph.inputs.size(); ++k) {
    const int id = backward.graph.inputs[k];
    if (!used[id]) continue;
    if (k < gradient_count) {
      gradient_inputs.push_back(id);
      backward.output_gradients.push_back(gradient_outputs[k]);
    } else {
      saved_inputs.push_back(id);
      backward.saved.push_back(value_of_input[k - gradient_count]);
    }
  }
  backward.graph.inputs = std::move(saved_inputs);
  backward.graph.inputs.insert(backward.graph.inputs.end(), gradient_inputs.begin(), gradient_inputs.end());
  backward.graph.remove_unused_values();
  return result;
}

}  // namespace zenith::capture
