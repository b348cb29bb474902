#include "runtime/state_layout.h"

namespace zenith::detail {

StateLayout::StateLayout(const State& state) {
  entries_.reserve(state.size());
  for (const auto& item : state) {
    const auto& tensor = item.second;
    Entry entry;
    if (tensor.defined()) {
      entry.defined = true;
      entry.requires_grad = tensor.requires_grad();
      entry.dtype = tensor.scalar_type();
      entry.device = tensor.device();
      entry.rank = static_cast<std::uint32_t>(tensor.dim());
      entry.offset = static_cast<std::uint32_t>(dims_.size());
      dims_.insert(dims_.end(), tensor.sizes().begin(), tensor.sizes().end());
      dims_.insert(dims_.end(), tensor.strides().begin(), tensor.strides().end());
    }
    entries_.push_back(entry);
  }
}

bool StateLayout::holds_one(const at::Tensor& tensor, const Entry& entry, bool with_requires_grad) const {
  if (!tensor.defined()) return true;
  if (!entry.defined || tensor.scalar_type() != entry.dtype || tensor.device() != entry.device) return false;
  if (with_requires_grad && tensor.requires_grad() != entry.requires_grad) return false;
  const auto sizes = tensor.sizes();
  const auto strides = tensor.strides();
  if (sizes.size() != entry.rank) return false;
  const std::int64_t* dims = dims_.data() + entry.offset;
  for (std::uint32_t d = 0; d < entry.rank; ++d) {
    if (sizes[d] != dims[d] || strides[d] != dims[entry.rank + d]) return false;
  }
  return true;
}

bool StateLayout::holds(const State& state, bool with_requires_grad) const {
  if (state.size() != entries_.size()) return false;
  for (std::size_t i = 0; i < state.size(); ++i) {
    if (!holds_one(state[i].second, entries_[i], with_requires_grad)) return false;
  }
  return true;
}

}  // namespace zenith::detail
