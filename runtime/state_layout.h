// StateLayout: the dtype, device, sizes, strides and requires_grad of a module's parameters and
// buffers when read, kept flat, so that every call can check in one pass that none changed in
// place (set_data, resize_ and set_ keep a tensor and change these). A plan hit pays this check
// for every state tensor (201 for BERT-base, 320 for ResNet-50). Done with a TensorType per
// tensor (two heap vectors each, compared through memcmp), it took 20% of the samples of perf
// over bench_call_overhead --synthetic 201 on a 2-core CPU, all three modes together; with these
// records 16%, most of it reading the tensors' own metadata.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

namespace zenith::detail {

class StateLayout {
 public:
  /// A module's parameters and buffers by name, in slot order (ModuleAccess::state).
  using State = std::vector<std::pair<std::string, at::Tensor>>;

  StateLayout() = default;
  /// Records each tensor's layout (an undefined tensor as undefined).
  explicit StateLayout(const State& state);

  /// Whether `state`'s tensors, in the recorded order, still have the recorded layouts. A tensor
  /// undefined now passes (a slot that loses its tensor is a new slot: the caller's slot check
  /// sees it); one defined now that was undefined when recorded does not. requires_grad is
  /// compared only with `with_requires_grad`: it matters to a call in grad mode alone (which plan
  /// kind serves it), and reading it goes through a virtual call of the tensor's autograd
  /// metadata, 12% of a graphed BERT-base b1 call's host time in an H200 profile.
  bool holds(const State& state, bool with_requires_grad = true) const;

 private:
  struct Entry {
    bool defined = false;
    bool requires_grad = false;
    c10::ScalarType dtype = c10::ScalarType::Undefined;
    c10::Device device = c10::Device(c10::kCPU);
    std::uint32_t rank = 0;
    std::uint32_t offset = 0;  // into dims_: rank sizes, then rank strides
  };

  bool holds_one(const at::Tensor& tensor, const Entry& entry, bool with_requires_grad) const;

  std::vector<Entry> entries_;
  std::vector<std::int64_t> dims_;
};

}  // namespace zenith::detail
