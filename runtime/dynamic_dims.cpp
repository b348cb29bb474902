#include "runtime/dynamic_dims.h"

#include <algorithm>
#include <numeric>

#include <ATen/ATen.h>
#include <fmt/format.h>

namespace zenith::capture {
namespace {

bool dim_less(const DynamicDim& a, const DynamicDim& b) {
  return a.argument != b.argument ? a.argument < b.argument : a.dim < b.dim;
}
bool dim_equal(const DynamicDim& a, const DynamicDim& b) { return a.argument == b.argument && a.dim == b.dim; }

// A zero tensor of `sizes` whose dimensions lie in memory in the same order as `like`'s.
at::Tensor zeros_in_order_of(const at::Tensor& like, const std::vector<std::int64_t>& sizes) {
  std::vector<std::int64_t> order(static_cast<std::size_t>(like.dim()));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) { return like.stride(a) > like.stride(b); });
  std::vector<std::int64_t> ordered_sizes, inverse(order.size());
  for (std::size_t k = 0; k < order.size(); ++k) {
    ordered_sizes.push_back(sizes[static_cast<std::size_t>(order[k])]);
    inverse[static_cast<std::size_t>(order[k])] = static_cast<std::int64_t>(k);
  }
  return at::zeros(ordered_sizes, like.options()).permute(inverse);
}

}  // namespace

std::string check_dims(const std::vector<c10::IValue>& args, std::vector<DynamicDim>& dims) {
  for (auto& dim : dims) {
    if (dim.argument < 0 || dim.argument >= static_cast<int>(args.size()) || !args[dim.argument].isTensor()) {
      return fmt::format("argument {} is not a tensor argument of this call", dim.argument);
    }
    const auto& tensor = args[dim.argument].toTensor();
    const auto rank = tensor.dim();
    if (dim.dim < -rank || dim.dim >= rank) {
      return fmt::format("argument {} has {} dimensions; dim {} is not one of them", dim.argument, rank, dim.dim);
    }
    if (dim.dim < 0) dim.dim += static_cast<int>(rank);
    if (tensor.size(dim.dim) < 2) {
      return fmt::format("argument {} dim {} has size {}; sizes 0 and 1 stay exact", dim.argument, dim.dim,
                         tensor.size(dim.dim));
    }
    if (!tensor.is_non_overlapping_and_dense()) {
      return fmt::format("argument {} is not dense (a slice or an expanded view); its sizes stay exact", dim.argument);
    }
  }
  dims = merge_dims(dims, {});
  return "";
}

std::vector<DynamicDim> changed_dims(const Signature& before, const Signature& now) {
  if (before.args.size() != now.args.size() || before.grad_mode != now.grad_mode ||
      before.training != now.training || before.state_fingerprint != now.state_fingerprint) {
    return {};
  }
  std::vector<DynamicDim> dims;
  for (std::size_t i = 0; i < now.args.size(); ++i) {
    const auto& a = before.args[i];
    const auto& b = now.args[i];
    if (a.is_tensor != b.is_tensor || (!a.is_tensor && a.scalar != b.scalar)) return {};
    if (!a.is_tensor) continue;
    if (a.tensor.dtype != b.tensor.dtype || a.tensor.device != b.tensor.device ||
        a.tensor.rank() != b.tensor.rank() || a.tensor.requires_grad != b.tensor.requires_grad) {
      return {};
    }
    for (std::size_t d = 0; d < a.tensor.sizes.size(); ++d) {
      if (a.tensor.sizes[d] != b.tensor.sizes[d]) dims.push_back({static_cast<int>(i), static_cast<int>(d)});
    }
  }
  return dims;
}

std::vector<DynamicDim> merge_dims(std::vector<DynamicDim> dims, const std::vector<DynamicDim>& more) {
  dims.insert(dims.end(), more.begin(), more.end());
  std::sort(dims.begin(), dims.end(), dim_less);
  dims.erase(std::unique(dims.begin(), dims.end(), dim_equal), dims.end());
  return dims;
}

std::vector<int> share_symbols(const std::vector<c10::IValue>& args, const std::vector<DynamicDim>& dims) {
  std::vector<std::int64_t> symbol_sizes;
  std::vector<int> symbol_of;
  for (const auto& dim : dims) {
    const auto size = args[dim.argument].toTensor().size(dim.dim);
    auto it = std::find(symbol_sizes.begin(), symbol_sizes.end(), size);
    symbol_of.push_back(static_cast<int>(it - symbol_sizes.begin()));
    if (it == symbol_sizes.end()) symbol_sizes.push_back(size);
  }
  return symbol_of;
}

std::vector<c10::IValue> probe_arguments(const std::vector<c10::IValue>& args, const std::vector<DynamicDim>& dims,
                                         const std::vector<int>& symbol_of, const std::vector<std::int64_t>& sizes) {
  std::vector<c10::IValue> probe = args;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (!args[i].isTensor()) continue;
    const auto& original = args[i].toTensor();
    auto new_sizes = original.sizes().vec();
    bool resized = false;
    for (std::size_t k = 0; k < dims.size(); ++k) {
      if (dims[k].argument != static_cast<int>(i)) continue;
      new_sizes[static_cast<std::size_t>(dims[k].dim)] = sizes[static_cast<std::size_t>(symbol_of[k])];
      resized = true;
    }
    if (!resized) continue;
    auto tensor = zeros_in_order_of(original, new_sizes);
    auto target = tensor;
    auto source = original;
    for (int d = 0; d < original.dim(); ++d) {
      const auto common = std::min(original.size(d), new_sizes[static_cast<std::size_t>(d)]);
      target = target.narrow(d, 0, common);
      source = source.narrow(d, 0, common);
    }
    target.copy_(source);
    probe[i] = tensor;
  }
  return probe;
}

}  // namespace zenith::capture
