#include "passes/meta_values.h"

#include <ATen/ATen.h>

#include "core/aten_call.h"

namespace zenith::passes {

std::vector<at::Tensor> MetaValues::run(const ir::Node& node) {
  return ir::AtenCall(node).run([&](int id) -> const at::Tensor& { return tensor(id); });
}

const at::Tensor& MetaValues::tensor(int id) {
  auto it = tensors_.find(id);
  if (it != tensors_.end()) return it->second;
  const auto& type = graph_.value(id).type;
  auto tensor = at::empty_strided(type.sizes, type.strides, at::TensorOptions().dtype(type.dtype).device(c10::kMeta));
  return tensors_.emplace(id, std::move(tensor)).first->second;
}

}  // namespace zenith::passes
