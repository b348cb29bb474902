// A training signature's plans: the forward differentiated by the derivative rules, both
// directions optimized and lowered, and their CUDA graphs.
#include "runtime/engine.h"

#include <algorithm>

#include "capture/backward_capture.h"
#include "core/log.h"
#include "passes/autodiff/backward_graph.h"
#include "passes/attention_fusion.h"
#include "passes/identity_elimination.h"
#include "passes/autodiff/training_rewrite.h"
#include "passes/channels_last_convolutions.h"
#include "runtime/call_tensors.h"
#include "core/elapsed.h"

namespace zenith::detail {

Engine::TrainingBuild Engine::plan_training(ir::Graph graph, const std::vector<c10::IValue>& args, const State& state,
                                            CompileReport& report) {
  auto start = Clock::now();
  auto inputs = call_tensors(args, state);
  std::vector<bool> requires_grad;
  for (const auto& tensor : inputs) requires_grad.push_back(tensor.requires_grad());
  const bool relaid = options_.channels_last && passes::convolutions_channels_last(graph, /*training=*/true);
  // Attention written out by hand becomes one scaled_dot_product_attention node before the
  // training rewrite, which gives it the fused kernel with a backward of its own (CUDA only). A
  // dropout of probability 0 on the probabilities (a model's configured off) goes first.
  PassReport identities, attention;
  passes::IdentityElimination().run(graph, identities);
  passes::AttentionFusion().run(graph, attention);
  if (attention.counters["fused"] > 0) {
    log::info("{}: training: {} attention patterns fused", options_.name, attention.counters["fused"]);
  }
  auto rewrite = autodiff::rewrite_for_training(graph);
  if (rewrite.attention_kernels > 0) {
    log::info("{}: training: {} attention nodes run the fused kernel eager's scaled_dot_product_attention chooses",
              options_.name, rewrite.attention_kernels);
  }
  auto run = capture::forward_run_for_backward(graph, inputs, requires_grad);
  for (int id : rewrite.provisional) {
    if (!run.types.at(id)) continue;  // a result the kernel leaves undefined (None, a size)
    auto type = *run.types[id];
    type.requires_grad = false;
    graph.value(id).type = type;
  }
  // Channels-last copies and fused attention kernels changed the layout of what follows them; the
  // run says what it became.
  if (relaid || rewrite.attention_kernels > 0) {
    for (std::size_t id = 0; id < run.types.size(); ++id) {
      if (run.types[id] && graph.values[id]) graph.values[id]->type.strides = run.types[id]->strides;
    }
  }
  auto captured = capture::capture_backward(graph, std::move(run), requires_grad);
  TrainingBuild build;
  if (!captured.unsupported.empty()) {
    build.refusal = captured.unsupported;
    build.op = captured.op;
    return build;
  }
  auto& backward = captured.backward;
  if (backward.graph.outputs.empty()) {
    build.plan = optimize_and_lower(std::move(graph), report, /*inference=*/false);
    return build;
  }
  autodiff::rematerialize(graph, backward);
  auto training = std::make_shared<TrainingPlan>();
  training->call_outputs = graph.outputs.size();
  training->output_structure = graph.output_structure;
  training->differentiable = captured.differentiable;
  training->output_gradients = backward.output_gradients;
  training->input_gradients = backward.input_gradients;
  training->inputs = inputs.size();
  report.backward.saved_values = static_cast<std::int64_t>(backward.saved.size());
  report.backward.recomputed_values = backward.recomputed;
  graph.outputs.insert(graph.outputs.end(), backward.saved.begin(), backward.saved.end());
  double autodiff_ms = ms_since(start);
  training->forward = optimize_and_lower(std::move(graph), report, /*inference=*/false);
  auto backward_start = Clock::now();
  CompileReport backward_report;
  auto backward_plan = optimize_and_lower(std::move(backward.graph), backward_report, /*inference=*/false, "backward");
  const auto saved_count = backward.saved.size();
  for (std::size_t k = 0; k < training->output_gradients.size(); ++k) {
    training->gradient_types.push_back(backward_plan->graph.value(backward_plan->graph.inputs[saved_count + k]).type);
  }
  training->backward = std::move(backward_plan);
  if (options_.cuda_graphs) attach_graphs(*training, inputs.size() - state.size(), saved_count);
  report.backward.compiled = true;
  report.backward.nodes = backward_report.nodes_final;
  report.backward.groups = backward_report.groups;
  report.kernels_compiled += backward_report.kernels_compiled;
  report.kernel_cache_hits += backward_report.kernel_cache_hits;
  report.backward.ms = autodiff_ms + ms_since(backward_start);
  build.plan = training->forward;
  build.training = std::move(training);
  return build;
}

void Engine::attach_graphs(TrainingPlan& training, std::size_t arguments, std::size_t saved) const {
  const auto& steps = training.forward->steps;
  if (std::none_of(steps.begin(), steps.end(), [](const Step& step) { return step.device.is_cuda(); })) return;
  // The forward reads parameters and buffers where they lie; arguments are copied in.
  std::vector<bool> forward_by_address(training.inputs, false);
  std::fill(forward_by_address.begin() + static_cast<std::ptrdiff_t>(arguments), forward_by_address.end(), true);
  std::string why;
  training.forward_graph = make_plan_graph(training.forward, std::move(forward_by_address), training.call_outputs,
                                           "the training forward of " + options_.name, graph_counters_, why);
  if (!training.forward_graph) log::info("{}: the training forward is not replayed as a CUDA graph: {}", options_.name, why);
  // The saved values stay where a graphed forward wrote them; incoming gradients are copied in.
  std::vector<bool> backward_by_address(training.backward->graph.inputs.size(), false);
  if (training.forward_graph) {
    std::fill(backward_by_address.begin(), backward_by_address.begin() + static_cast<std::ptrdiff_t>(saved), true);
  }
  training.backward_graph = make_plan_graph(training.backward, std::move(backward_by_address), 0,
                                            "the training backward of " + options_.name, graph_counters_, why);
  if (!training.backward_graph) log::info("{}: the training backward is not replayed as a CUDA graph: {}", options_.name, why);
}

}  // namespace zenith::detail
