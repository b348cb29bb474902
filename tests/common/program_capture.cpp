#include "common/program_capture.h"

#include <vector>

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

}  // namespace zenith::testing
