#include "capture/torchscript_forward.h"

#include <memory>
#include <mutex>

#include <ATen/TracerMode.h>
#include <ATen/record_function.h>
#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/csrc/jit/runtime/graph_executor.h>

namespace zenith::capture {
namespace {

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
    schema_ = std::make_unique<c10::FunctionSchema>(forward.getSchema());
    function_ = std::make_unique<torch::jit::GraphFunction>(forward.qualname(), std::move(graph), nullptr,
                                                            torch::jit::ExecutorExecutionMode::SIMPLE);
    function_->get_executor();  // optimizes the graph now, under the guards above
  }

  torch::jit::Module module_;
  std::once_flag built_;
  std::unique_ptr<c10::FunctionSchema> schema_;  // the module's, with its default values
  std::unique_ptr<torch::jit::GraphFunction> function_;
};

}  // namespace

std::function<c10::IValue(const std::vector<c10::IValue>&)> unfused_forward(torch::jit::Module module) {
  auto forward = std::make_shared<UnfusedForward>(std::move(module));
  return [forward](const std::vector<c10::IValue>& args) { return (*forward)(args); };
}

}  // namespace zenith::capture
