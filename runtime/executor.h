// The executor: runs a Plan on bound inputs.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/core/ivalue.h>

#include "core/plan.h"
#include "runtime/step_timer.h"
#include "runtime/unwritten_inputs.h"

namespace zenith {

class DerivedValues;

/// Thrown by execute() and execute_flat() when one of the plan's value checks fails: the call's
/// data differs from what the forward read at capture, and the plan does not hold for it. Nothing a
/// caller sees has been written (Plan::value_checks).
class ValueCheckFailed : public std::runtime_error {
 public:
  explicit ValueCheckFailed(const ValueCheck& check);
  const std::string& op() const { return op_; }

 private:
  std::string op_;
};

/// Runs `plan`. `inputs` holds one tensor per graph input, in graph input order (call tensors,
/// then parameters and buffers); taken by value so that a caller's temporary list is moved into the
/// plan's values rather than copied (a reference count each, hundreds per call). Returns the
/// outputs nested as the graph's output structure. Throws zenith::Error when a backend fails. With
/// a `timer`, each step is timed (a replay profile). With `derived` (the plan's DerivedValues), its
/// derived steps do not run: their kept results are read (computed again first when a parameter
/// changed). With `unwritten` (only while the host records the plan as a CUDA graph), each kernel
/// step is launched with its entry (zn_launch_args.inputs_unwritten).
c10::IValue execute(const Plan& plan, std::vector<at::Tensor> inputs, StepTimer* timer = nullptr,
                    const DerivedValues* derived = nullptr);

/// Runs `plan` and returns its graph outputs flat, in order.
std::vector<at::Tensor> execute_flat(const Plan& plan, std::vector<at::Tensor> inputs, StepTimer* timer = nullptr,
                                     const DerivedValues* derived = nullptr, const UnwrittenInputs* unwritten = nullptr);

/// Runs one step of a plan on `values` (by graph value id): reads its inputs there and puts its
/// outputs there.
void run_step(const Step& step, std::vector<at::Tensor>& values);

/// An output a kernel handed back in its own memory, checked against the IR's type and laid out
/// as the IR says (copied when its strides differ). Throws zenith::Error naming `backend` when its
/// dtype, device or sizes differ.
at::Tensor conform_output(at::Tensor tensor, const ir::TensorType& type, const std::string& backend, std::size_t output);

/// Nests flat outputs as `structure` says.
c10::IValue nest_outputs(const ir::OutputStructure& structure, const std::vector<at::Tensor>& flat);

}  // namespace zenith
