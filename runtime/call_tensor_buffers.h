// A call's tensor vector (call_tensors.h: its tensor arguments, then the module's parameters and
// buffers) kept from call to call, so that a call writes only its own arguments into it. Built
// afresh, the vector copied every parameter (an atomic increment and decrement each, 201 of them
// for BERT-base) at every call: 8% of a graphed BERT-base b1 call's host time in an H200 profile.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

namespace zenith::detail {

/// The vectors of the calls in flight and of those that ended. Thread-safe: concurrent calls
/// each lease one of their own.
class CallTensorBuffers {
 public:
  using State = std::vector<std::pair<std::string, at::Tensor>>;

  /// One call's vector; given back when destroyed, its arguments released first (the buffers keep
  /// no caller's tensor alive between calls).
  class Lease {
   public:
    Lease(Lease&& other) noexcept : owner_(other.owner_), buffer_(std::move(other.buffer_)) {}
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    Lease& operator=(Lease&&) = delete;
    ~Lease();
    /// The call's tensor arguments in order, then the state's tensors: call_tensors(args, state).
    const std::vector<at::Tensor>& tensors() const;

   private:
    friend class CallTensorBuffers;
    struct Buffer {
      std::uint64_t generation = 0;  // of the state its tail holds
      std::size_t arguments = 0;     // tensors before the state's
      std::vector<at::Tensor> tensors;
    };
    Lease(CallTensorBuffers& owner, std::unique_ptr<Buffer> buffer) : owner_(&owner), buffer_(std::move(buffer)) {}
    CallTensorBuffers* owner_;
    std::unique_ptr<Buffer> buffer_;
  };

  /// A vector of `args`' tensors, then `state`'s. `generation` names the state: the caller gives a
  /// state another generation whenever any of its tensors may differ (a kept vector of another
  /// generation is filled again).
  Lease lease(const std::vector<c10::IValue>& args, const State& state, std::uint64_t generation);
  /// Drops the kept vectors of generations before `generation` (they hold an old state's tensors,
  /// which would otherwise stay alive), and those given back later.
  void retire_before(std::uint64_t generation);

 private:
  void give_back(std::unique_ptr<Lease::Buffer> buffer) noexcept;

  std::mutex mutex_;
  std::vector<std::unique_ptr<Lease::Buffer>> kept_;
  std::uint64_t oldest_kept_ = 0;  // a vector of an earlier generation given back is dropped
};

}  // namespace zenith::detail
