#include "capture/torchscript_forward.h"

#include <memory>
#include <mutex>
#include <optional>

#include <ATen/TracerMode.h>
#include <ATen/record_function.h>
#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/csrc/jit/runtime/graph_executor.h>

namespace zenith::capture {
namespace {

// prim::NumToTensor makes its tensor without the dispatcher, so a tracer running the graph would
// take it for a constant of unknown origin, and `aten::Int` of it for a read of unseen data.
// aten::scalar_tensor makes the same tensor (a CPU scalar of the number's type) through the
// dispatcher: the trace then shows it computed from a size.
void trace_numbers_to_tensors(torch::jit::Block* block) {
  for (auto* node : block->nodes()) {
    for (auto* inner : node->blocks()) trace_numbers_to_tensors(inner);
    if (node->kind() != c10::prim::NumToTensor) continue;
    auto* number = node->input();
    std::optional<c10::ScalarType> dtype;
    if (number->type()->kind() == c10::TypeKind::IntType) dtype = c10::kLong;
    if (number->type()->kind() == c10::TypeKind::FloatType) dtype = c10::kDouble;
    if (number->type()->kind() == c10::TypeKind::BoolType) dtype = c10::kBool;
    if (!dtype) continue;  // a Scalar of unknown type: left as it is
    torch::jit::WithInsertPoint here(node);
    auto* tensor = block->owningGraph()->insert(c10::aten::scalar_tensor, {number},
                                                {torch::jit::NamedValue("dtype", *dtype)});
    tensor->setType(node->output()->type());
    node->output()->replaceAllUsesWith(tensor);
  }
  // Dead now; removed once the walk is done.
  for (auto it = block->nodes().begin(); it != block->nodes().end(); ++it) {
    if (it->kind() == c10::prim::NumToTensor && !it->hasUses()) it.destroyCurrent();
  }
}

// Built on first use: most compiled modules that fall back to eager or hit the plan cache never
// need it, and building it copies and inlines the whole module graph.
class UnfusedForward {
 public:
  explicit UnfusedForward(torch::jit::Module module) : module_(std::move(module)) {}

  c10::IValue operator()(const std::vector<c10::IValue>& args) {
    std::call_once(built_, [this] { build(); });
    torch::jit::Stack stack;
    stack.reserve(args.size() + 1);
    stack.emplace_back(module_._ivalue());
    stack.insert(stack.end(), args.begin(), args.end());
    // As Method::operator() does: check the arguments against the schema and fill defaults.
    schema_->checkAndNormalizeInputs(stack, {});
    function_->run(stack);
    return stack.front();
  }

 private:
  void build() {
    // Building runs TorchScript's graph optimizations (constant pooling compares tensor constants
    // with aten::equal, constant propagation runs ops on constants). None of that is the forward,
    // and it happens inside the first capture: neither the tracer nor the capture's detector of
    // data read into C++ may see it (it made every Hugging Face model "read data" on its first call).
    at::tracer::impl::NoTracerDispatchMode no_tracing;
    at::RecordFunctionGuard no_observers(/*is_enabled=*/false);
    auto& forward = torch::jit::toGraphFunction(module_.get_method("forward").function());
    auto graph = forward.graph()->copy();
    // Submodule calls would otherwise run through each submodule's own (fusing) executor.
    torch::jit::Inline(*graph);
    trace_numbers_to_tensors(graph->block());
    schema_ = std::make_unique<c10::FunctionSchema>(forward.getSchema());
    function_ = std::make_unique<torch::jit::GraphFunction>(forward.qualname(), std::move(graph), nullptr,
                                                            torch::jit::ExecutorExecutionMode::SIMPLE);
    // The executor optimizes its graph and builds its plan on the first run; do that now, under the
    // guards above (the simple executor's plan does not depend on the inputs).
    torch::jit::Stack no_inputs;
    function_->get_executor().getPlanFor(no_inputs);
  }

  torch::jit::Module module_;
  std::once_flag built_;
  std::unique_ptr<c10::FunctionSchema> schema_;  // the module's, with its default values
  std::unique_ptr<torch::jit::GraphFunction> function_;
};

}  // namespace

bool straight_line(const torch::jit::Module& module) {
  auto graph = torch::jit::toGraphFunction(module.get_method("forward").function()).graph()->copy();
  torch::jit::Inline(*graph);
  for (const auto* node : graph->nodes()) {
    if (!node->blocks().empty()) return false;
  }
  return true;
}

std::function<c10::IValue(const std::vector<c10::IValue>&)> unfused_forward(torch::jit::Module module) {
  auto forward = std::make_shared<UnfusedForward>(std::move(module));
  return [forward](const std::vector<c10::IValue>& args) { return (*forward)(args); };
}

}  // namespace zenith::capture
