#include "runtime/executor.h"

#include <algorithm>
#include <utility>

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <fmt/format.h>

#include "core/aten_call.h"
#include "core/dlpack_view.h"
#include "runtime/derived_values.h"
#include "zenith/error.h"

namespace zenith {
namespace {

// The stream a launch on `device` must use: PyTorch's current stream there (CPU: none).
void* current_stream(const c10::Device& device) {
  if (device.is_cpu()) return nullptr;
  c10::impl::VirtualGuardImpl guard(device.type());
  return guard.getStream(device).native_handle();
}

void run_kernel_step(const Step& step, std::vector<at::Tensor>& values, const std::uint8_t* inputs_unwritten) {
  // The step's device is current while it runs, whatever the caller's is: plugins launch, and
  // allocate workspace through the host, on the current device (a module on cuda:1 called while
  // cuda:0 is current).
  c10::OptionalDeviceGuard device_guard;
  if (!step.device.is_cpu()) device_guard.reset_device(step.device);
  std::vector<DLTensor> inputs;
  inputs.reserve(step.inputs.size());
  for (int id : step.inputs) inputs.push_back(borrow_dlpack(values[id]));
  // A kernel that provides outputs (a dispatcher call) hands its results over instead of copying
  // them into memory the host allocated.
  const bool ask = step.kernel->provides_outputs();
  std::vector<DLManagedTensor*> provided(ask ? step.outputs.size() : 0, nullptr);
  std::vector<bool> asked(step.outputs.size(), false);
  std::vector<DLTensor> outputs;
  outputs.reserve(step.outputs.size());
  for (std::size_t o = 0; o < step.outputs.size(); ++o) {
    int alias = step.output_aliases.empty() ? -1 : step.output_aliases[o];
    const auto& type = step.output_types[o];
    if (alias >= 0) {
      values[step.outputs[o]] = values[step.inputs[alias]];
    } else if (ask && type.numel() > 0) {
      asked[o] = true;
      outputs.push_back(describe_dlpack(type));
      continue;
    } else {
      values[step.outputs[o]] =
          at::empty_strided(type.sizes, type.strides, at::TensorOptions().dtype(type.dtype).device(type.device));
    }
    outputs.push_back(borrow_dlpack(values[step.outputs[o]]));
  }
  step.kernel->backend().launch(*step.kernel, inputs, outputs, current_stream(step.device), ask ? &provided : nullptr,
                                inputs_unwritten);
  try {
    for (std::size_t o = 0; o < step.outputs.size(); ++o) {
      if (!asked[o]) continue;
      auto* managed = std::exchange(provided[o], nullptr);
      if (managed == nullptr) {
        throw Error(fmt::format("backend '{}' did not hand back output {} of its kernel, which the launch asked it "
                                "for (zn_launch_args.provided); the plugin breaks ABI 1.4",
                                step.backend, o));
      }
      values[step.outputs[o]] = conform_output(adopt_dlpack(managed), step.output_types[o], step.backend, o);
    }
  } catch (...) {
    // What the kernel handed back and nothing adopted yet is freed before the error goes up.
    release_dlpack(provided);
    throw;
  }
}

void run_host_step(const Step& step, std::vector<at::Tensor>& values) {
  auto results = step.host_call->run([&](int id) -> const at::Tensor& { return values[id]; });
  for (std::size_t o = 0; o < step.outputs.size(); ++o) values[step.outputs[o]] = std::move(results[o]);
}

// Exactly the value read at capture: same type and every element equal (NaN differs from itself,
// so a NaN read always runs eagerly).
bool same_value(const at::Tensor& value, const at::Tensor& expected) {
  if (!value.defined() || value.scalar_type() != expected.scalar_type() || value.sizes() != expected.sizes()) {
    return false;
  }
  return at::equal(value.device() == expected.device() ? value : value.to(expected.device()), expected);
}

}  // namespace

ValueCheckFailed::ValueCheckFailed(const ValueCheck& check)
    : std::runtime_error(fmt::format("the value {} read at capture (graph value %{}) is different in this call",
                                     check.op, check.value)),
      op_(check.op) {}

at::Tensor conform_output(at::Tensor tensor, const ir::TensorType& type, const std::string& backend, std::size_t output) {
  if (tensor.scalar_type() != type.dtype || tensor.device() != type.device ||
      tensor.sizes() != c10::IntArrayRef(type.sizes)) {
    throw Error::mismatch(fmt::format("output {} handed back by backend '{}'", output, backend), type.to_string(),
                          fmt::format("{} {} on {}", ir::dtype_name(tensor.scalar_type()), c10::str(tensor.sizes()),
                                      tensor.device().str()));
  }
  if (tensor.strides() == c10::IntArrayRef(type.strides)) return tensor;
  // Later steps were compiled for the IR's layout.
  auto laid_out = at::empty_strided(type.sizes, type.strides, tensor.options());
  laid_out.copy_(tensor);
  return laid_out;
}

c10::IValue nest_outputs(const ir::OutputStructure& structure, const std::vector<at::Tensor>& flat) {
  switch (structure.kind) {
    case ir::OutputStructure::Kind::Tensor: return flat.at(structure.index);
    case ir::OutputStructure::Kind::Tuple: {
      std::vector<c10::IValue> elements;
      for (const auto& element : structure.elements) elements.push_back(nest_outputs(element, flat));
      return c10::ivalue::Tuple::create(std::move(elements));
    }
    case ir::OutputStructure::Kind::List: {
      std::vector<at::Tensor> elements;
      for (const auto& element : structure.elements) elements.push_back(nest_outputs(element, flat).toTensor());
      return c10::IValue(elements);
    }
    case ir::OutputStructure::Kind::Dict: {
      // Dict[str, Tensor] as TorchScript types the dicts Hugging Face models return, when every
      // value is a tensor.
      bool tensors = std::all_of(structure.elements.begin(), structure.elements.end(),
                                 [](const auto& e) { return e.kind == ir::OutputStructure::Kind::Tensor; });
      c10::impl::GenericDict dict(c10::StringType::get(), tensors ? c10::TypePtr(c10::TensorType::get())
                                                                   : c10::TypePtr(c10::AnyType::get()));
      for (std::size_t i = 0; i < structure.elements.size(); ++i) {
        dict.insert(structure.keys.at(i), nest_outputs(structure.elements[i], flat));
      }
      return dict;
    }
    case ir::OutputStructure::Kind::Constant: return ir::box_constant(structure.constant);
  }
  return {};
}

void run_step(const Step& step, std::vector<at::Tensor>& values) {
  if (step.kind == Step::Kind::Kernel) run_kernel_step(step, values, nullptr);
  else run_host_step(step, values);
}

c10::IValue execute(const Plan& plan, std::vector<at::Tensor> inputs, StepTimer* timer, const DerivedValues* derived) {
  return nest_outputs(plan.graph.output_structure, execute_flat(plan, std::move(inputs), timer, derived));
}

std::vector<at::Tensor> execute_flat(const Plan& plan, std::vector<at::Tensor> inputs, StepTimer* timer,
                                     const DerivedValues* derived, const UnwrittenInputs* unwritten) {
  const auto& graph = plan.graph;
  // The graph holds the casts autocast made when it was traced; autocast must not cast again.
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  if (inputs.size() != graph.inputs.size()) {
    throw Error::mismatch("plan inputs", std::to_string(graph.inputs.size()), std::to_string(inputs.size()));
  }
  std::vector<at::Tensor> values(graph.values.size());
  // An argument over a derived value's source: the kept value could go stale in mid-call.
  if (derived != nullptr && derived->shares_memory_with_arguments(inputs)) derived = nullptr;
  if (derived != nullptr) derived->bind(inputs, values);
  for (std::size_t i = 0; i < inputs.size(); ++i) values[graph.inputs[i]] = std::move(inputs[i]);
  for (const auto& [id, tensor] : graph.constants) values[id] = tensor;
  auto check = plan.value_checks.begin();
  auto check_through = [&](int step) {
    for (; check != plan.value_checks.end() && check->after_step <= step; ++check) {
      if (!same_value(values[check->value], check->expected)) throw ValueCheckFailed(*check);
    }
  };
  check_through(-1);
  for (std::size_t index = 0; index < plan.steps.size(); ++index) {
    const auto& step = plan.steps[index];
    if (derived != nullptr && derived->derived(index)) continue;
    if (timer != nullptr) timer->before(index, step);
    if (step.kind == Step::Kind::Kernel) {
      const auto* entry = unwritten != nullptr ? &(*unwritten)[index] : nullptr;
      run_kernel_step(step, values, entry != nullptr && !entry->empty() ? entry->data() : nullptr);
    } else {
      run_host_step(step, values);
    }
    if (timer != nullptr) timer->after(step);
    check_through(static_cast<int>(index));
    for (int id : step.release_after) values[id].reset();
  }
  std::vector<at::Tensor> flat;
  flat.reserve(graph.outputs.size());
  for (int id : graph.outputs) flat.push_back(values[id]);
  return flat;
}

}  // namespace zenith
