#include "common/program_checks.h"

#include <algorithm>
#include <vector>

#include "common_relative_error.h"
#include "core/interpreter.h"
#include "core/printer.h"
#include "core/verifier.h"

namespace zenith::testing {

capture::Capture capture_program(const RandomProgram& program) {
  detail::ModuleAccess access;
  access.forward = [run = program.run](const std::vector<c10::IValue>& args) {
    std::vector<at::Tensor> tensors;
    for (const auto& arg : args) tensors.push_back(arg.toTensor());
    return c10::IValue(run(tensors));
  };
  std::vector<c10::IValue> args(program.inputs.begin(), program.inputs.end());
  return capture::capture_forward(access, args, {});
}

std::string differences_on_every_draw(const ir::Graph& graph, const RandomProgram& program, double tolerance,
                                      double& worst) {
  std::vector<std::vector<at::Tensor>> draws = {program.inputs};
  draws.insert(draws.end(), program.fresh_inputs.begin(), program.fresh_inputs.end());
  std::string problems;
  for (std::size_t call = 0; call < draws.size(); ++call) {
    const auto got = ir::interpret(graph, draws[call]);
    const auto want = program.run(draws[call]);
    const std::string where = "draw " + std::to_string(call) + ": ";
    if (got.size() != want.size()) {
      problems += where + std::to_string(got.size()) + " outputs, eager " + std::to_string(want.size()) + "\n";
      continue;
    }
    for (std::size_t i = 0; i < want.size(); ++i) {
      // The layout a plan returns is the graph's declared one (runtime/executor.cpp lays a
      // kernel's result out as its type says: conform_output), where the interpreter keeps each
      // ATen kernel's own layout (a CPU attention's result follows its query's): the declared
      // type is what must be eager's.
      const auto& declared = graph.value(graph.outputs[i]).type;
      if (got[i].sizes() != want[i].sizes() || c10::IntArrayRef(declared.sizes) != want[i].sizes() ||
          c10::IntArrayRef(declared.strides) != want[i].strides()) {
        problems += where + "output " + std::to_string(i) + " is declared " + declared.to_string() + " and has sizes " +
                    c10::str(got[i].sizes()) + ", eager " + c10::str(want[i].sizes()) + " strides " +
                    c10::str(want[i].strides()) + "\n";
        continue;
      }
      const double error = relative_error(got[i].to(at::kFloat), want[i].to(at::kFloat));
      worst = std::max(worst, error / tolerance);
      if (!(error <= tolerance)) {  // NaN fails too
        problems += where + "output " + std::to_string(i) + ": error " + std::to_string(error) + " > tolerance " +
                    std::to_string(tolerance) + "\n";
      }
    }
  }
  return problems;
}

std::string rewritten_differences(const RandomProgram& program, const std::function<void(ir::Graph&)>& rewrite,
                                  double tolerance, double& worst) {
  std::string problems;
  ir::Graph graph;
  try {
    auto captured = capture_program(program);
    if (!captured.unsupported.empty()) return "capture: " + captured.unsupported + "\n" + program.description;
    graph = std::move(captured.graph);
    rewrite(graph);
    ir::verify(graph);
    problems = differences_on_every_draw(graph, program, tolerance, worst);
  } catch (const std::exception& error) {
    problems = std::string(error.what()) + "\n";
  }
  return problems.empty() ? problems : problems + program.description + ir::to_text(graph);
}

}  // namespace zenith::testing
