#include "runtime/module_tree_slots.h"

namespace zenith::detail {
namespace {

// One identity: appended while recording, compared while checking.
bool visit(const void* identity, std::vector<const void*>& out, const std::vector<const void*>* recorded, std::size_t& at) {
  if (recorded == nullptr) {
    out.push_back(identity);
    return true;
  }
  return at < recorded->size() && (*recorded)[at++] == identity;
}

const void* count(std::size_t n) { return reinterpret_cast<const void*>(n); }

}  // namespace

bool ModuleTreeSlots::walk(const torch::nn::Module& module, std::vector<const void*>& out,
                           const std::vector<const void*>* recorded, std::size_t& at) {
  if (!visit(&module, out, recorded, at)) return false;
  for (const auto& tensors : {module.parameters(/*recurse=*/false), module.buffers(/*recurse=*/false)}) {
    if (!visit(count(tensors.size()), out, recorded, at)) return false;
    for (const auto& tensor : tensors) {
      if (!visit(tensor.defined() ? tensor.unsafeGetTensorImpl() : nullptr, out, recorded, at)) return false;
    }
  }
  const auto children = module.children();
  if (!visit(count(children.size()), out, recorded, at)) return false;
  for (const auto& child : children) {
    if (!walk(*child, out, recorded, at)) return false;
  }
  return true;
}

void ModuleTreeSlots::record() {
  identities_.clear();
  std::size_t at = 0;
  walk(*module_, identities_, nullptr, at);
  recorded_ = true;
}

bool ModuleTreeSlots::unchanged() const {
  if (!recorded_) return false;
  std::vector<const void*> unused;
  std::size_t at = 0;
  return walk(*module_, unused, &identities_, at) && at == identities_.size();
}

}  // namespace zenith::detail
