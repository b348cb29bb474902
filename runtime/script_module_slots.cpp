#include "runtime/script_module_slots.h"

namespace zenith::detail {

void ScriptModuleSlots::record() {
  slots_.clear();
  shapes_.clear();
  record(module_._ivalue());
  recorded_ = true;
}

void ScriptModuleSlots::record(const c10::intrusive_ptr<c10::ivalue::Object>& object) {
  const auto& type = object->type();
  shapes_.push_back(Shape{object.get(), object->slots().size(), object->slots().data()});
  for (std::size_t i = 0; i < type->numAttributes(); ++i) {
    const auto& value = object->getSlot(i);
    auto class_type = type->getAttribute(i)->cast<c10::ClassType>();
    const bool submodule = class_type && class_type->is_module() && value.isObject();
    if (!submodule && !type->is_parameter(i) && !type->is_buffer(i)) continue;
    slots_.push_back(Slot{&object->slots()[i], value});
    if (submodule) record(value.toObject());
  }
}

namespace {

// A tensor by its TensorImpl, inline: IValue::isSameIdentity is a call out of line, and this runs
// for every parameter and buffer of every call. Anything else as IValue::isSameIdentity compares it.
bool same_identity(const c10::IValue& now, const c10::IValue& held) {
  if (now.isTensor() && held.isTensor()) return now.unsafeToTensorImpl() == held.unsafeToTensorImpl();
  return now.isSameIdentity(held);
}

}  // namespace

bool ScriptModuleSlots::unchanged() const {
  if (!recorded_) return false;
  // An attribute added to a module adds a slot to its object; its slot count is read without the
  // shared type pointer that type() copies (an atomic increment and decrement per module). With
  // its count, where the slots lie: a slot is then read at its recorded address.
  for (const auto& shape : shapes_) {
    const auto& slots = shape.object->slots();
    if (slots.size() != shape.attributes || slots.data() != shape.slots) return false;
  }
  for (const auto& slot : slots_) {
    if (!same_identity(*slot.address, slot.held)) return false;
  }
  return true;
}

}  // namespace zenith::detail
