#include "runtime/call_tensor_buffers.h"

#include <algorithm>
#include <new>

namespace zenith::detail {

CallTensorBuffers::Lease::~Lease() {
  if (!buffer_) return;  // moved from
  for (std::size_t i = 0; i < buffer_->arguments; ++i) buffer_->tensors[i].reset();
  owner_->give_back(std::move(buffer_));
}

const std::vector<at::Tensor>& CallTensorBuffers::Lease::tensors() const { return buffer_->tensors; }

CallTensorBuffers::Lease CallTensorBuffers::lease(const std::vector<c10::IValue>& args, const State& state,
                                                  std::uint64_t generation) {
  std::unique_ptr<Lease::Buffer> buffer;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!kept_.empty()) {
      buffer = std::move(kept_.back());
      kept_.pop_back();
    }
  }
  if (!buffer) buffer = std::make_unique<Lease::Buffer>();
  std::size_t arguments = 0;
  for (const auto& arg : args) arguments += arg.isTensor() ? 1 : 0;
  if (buffer->generation != generation || buffer->arguments != arguments ||
      buffer->tensors.size() != arguments + state.size()) {
    buffer->tensors.assign(arguments, at::Tensor());
    buffer->tensors.reserve(arguments + state.size());
    for (const auto& item : state) buffer->tensors.push_back(item.second);
    buffer->generation = generation;
    buffer->arguments = arguments;
  }
  std::size_t i = 0;
  for (const auto& arg : args) {
    if (arg.isTensor()) buffer->tensors[i++] = arg.toTensor();
  }
  return Lease(*this, std::move(buffer));
}

void CallTensorBuffers::retire_before(std::uint64_t generation) {
  std::vector<std::unique_ptr<Lease::Buffer>> retired;  // released outside the lock
  std::lock_guard<std::mutex> lock(mutex_);
  oldest_kept_ = std::max(oldest_kept_, generation);
  retired.swap(kept_);
}

void CallTensorBuffers::give_back(std::unique_ptr<Lease::Buffer> buffer) noexcept {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (buffer->generation >= oldest_kept_) {
      // From a lease's destructor: a vector that cannot be kept (no memory) is dropped instead.
      try {
        kept_.push_back(std::move(buffer));
        return;
      } catch (const std::bad_alloc&) {
      }
    }
  }
  // An old state's vector, or one not kept: its tensors go with it, outside the lock.
}

}  // namespace zenith::detail
