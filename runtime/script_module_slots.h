// Where a TorchScript module keeps its parameters, buffers and submodules, so that a call can
// check in a few microseconds that none was replaced, instead of reading them all by name again.
#pragma once

#include <cstddef>
#include <vector>

#include <torch/csrc/jit/api/module.h>

namespace zenith::detail {

/// The object slots of a TorchScript module that hold submodules, parameters and buffers, with
/// what each held when recorded. Not thread-safe: the engine calls it under its lock.
class ScriptModuleSlots {
 public:
  explicit ScriptModuleSlots(torch::jit::Module module) : module_(std::move(module)) {}

  /// Records every such slot of the module and its submodules as it is now.
  void record();
  /// Whether every recorded slot still holds what it held, and no module gained or lost an
  /// attribute (a parameter registered or a submodule replaced shows here). False before record().
  bool unchanged() const;

 private:
  struct Slot {
    // Into its object's slot vector, read straight: valid while the object's Shape holds (the
    // vector neither grew nor moved), which unchanged() checks first.
    const c10::IValue* address;
    c10::IValue held;  // the tensor or submodule object, compared by identity
  };
  struct Shape {
    c10::ivalue::Object* object;  // kept alive by module_ or by `held` of its parent's slot
    std::size_t attributes;       // its object's slots
    const c10::IValue* slots;     // where its object's slot vector lies
  };
  void record(const c10::intrusive_ptr<c10::ivalue::Object>& object);

  torch::jit::Module module_;
  std::vector<Slot> slots_;
  std::vector<Shape> shapes_;
  bool recorded_ = false;
};

}  // namespace zenith::detail
