#include "runtime/training_function.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <fmt/format.h>
#include <torch/csrc/autograd/custom_function.h>

#include "runtime/executor.h"
#include "runtime/plan_graph.h"
#include "zenith/error.h"

namespace zenith::capture {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The plan rides in the autograd context, which holds IValues only.
struct PlanHolder : torch::CustomClassHolder {
  explicit PlanHolder(std::shared_ptr<const TrainingPlan> p) : plan(std::move(p)) {}
  std::shared_ptr<const TrainingPlan> plan;
};

// Incoming gradients are laid out as the backward plan was compiled for (contiguous).
at::Tensor conform(const at::Tensor& gradient, const ir::TensorType& type, int output) {
  if (gradient.sizes() != c10::IntArrayRef(type.sizes) || gradient.scalar_type() != type.dtype) {
    throw Error::mismatch(fmt::format("zenith backward: the gradient of output {}", output), type.to_string(),
                          fmt::format("{} {}", ir::dtype_name(gradient.scalar_type()), c10::str(gradient.sizes())));
  }
  if (gradient.strides() == c10::IntArrayRef(type.strides)) return gradient;
  auto laid_out = at::empty_strided(type.sizes, type.strides, gradient.options());
  laid_out.copy_(gradient);
  return laid_out;
}

// A plan's run: its CUDA graph's when it has one.
std::vector<at::Tensor> run_plan(const Plan& plan, PlanGraph* graph, const std::vector<at::Tensor>& inputs) {
  return graph != nullptr ? graph->run(inputs) : execute_flat(plan, inputs);
}

struct CompiledCall : torch::autograd::Function<CompiledCall> {
  static variable_list forward(AutogradContext* ctx, at::TensorList inputs,
                               const std::shared_ptr<const TrainingPlan>& plan) {
    auto flat = run_plan(*plan->forward, plan->forward_graph.get(), inputs.vec());
    const auto split = flat.begin() + static_cast<std::ptrdiff_t>(plan->call_outputs);
    variable_list outputs(flat.begin(), split);
    ctx->save_for_backward(variable_list(split, flat.end()));
    ctx->saved_data["plan"] = c10::IValue::make_capsule(c10::make_intrusive<PlanHolder>(plan));
    variable_list constant;
    for (std::size_t k = 0; k < outputs.size(); ++k) {
      if (!plan->differentiable[k]) constant.push_back(outputs[k]);
    }
    if (!constant.empty()) ctx->mark_non_differentiable(constant);
    return outputs;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    if (at::GradMode::is_enabled()) {
      throw Error(
          "zenith: double backward (backward with create_graph=true) through a compiled call is not supported: its "
          "backward is compiled and has no derivative of its own. Compute higher-order gradients eagerly "
          "(CompileOptions::disable, or call the module itself for that step).");
    }
    auto plan = c10::static_intrusive_pointer_cast<PlanHolder>(ctx->saved_data["plan"].toCapsule())->plan;
    auto inputs = ctx->get_saved_variables();
    for (std::size_t k = 0; k < plan->output_gradients.size(); ++k) {
      const int output = plan->output_gradients[k];
      inputs.push_back(conform(grad_outputs.at(output), plan->gradient_types[k], output));
    }
    // The backward graph reads the saved values where the forward graph wrote them; once the
    // forward runs launch by launch for good, so does the backward.
    auto* graph = plan->backward_graph.get();
    if (graph != nullptr && plan->forward_graph && plan->forward_graph->disabled()) graph = nullptr;
    auto grads = run_plan(*plan->backward, graph, inputs);
    // One slot per forward argument: the tensors, then the plan (no gradient).
    variable_list result(plan->inputs + 1);
    for (std::size_t j = 0; j < grads.size(); ++j) result[plan->input_gradients[j]] = grads[j];
    return result;
  }
};

}  // namespace

c10::IValue run_training_call(const std::shared_ptr<const TrainingPlan>& plan, const std::vector<at::Tensor>& inputs) {
  // A TensorList, not a vector: apply() counts each of its tensors as an input of the node.
  auto outputs = CompiledCall::apply(at::TensorList(inputs), plan);
  return nest_outputs(plan->output_structure, outputs);
}

}  // namespace zenith::capture
