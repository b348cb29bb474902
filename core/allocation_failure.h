// What PyTorch's allocators throw when memory runs out, recognized on both sides of the plugin ABI:
// a plugin reports it as ZN_STATUS_OUT_OF_MEMORY (core/plugin_guard.h), the host as out of memory
// (runtime/out_of_memory.h). Header-only: plugins link LibTorch, not libzenith.
#pragma once

#include <exception>
#include <string>

#include <c10/util/Exception.h>

namespace zenith {

/// Whether `error` is an allocator's report that memory ran out: c10::OutOfMemoryError (CUDA's
/// caching allocator), or the CPU allocator's, which PyTorch throws as a plain c10::Error whose
/// message says "DefaultCPUAllocator: can't allocate memory" (or, in older versions, "not enough
/// memory").
inline bool is_allocation_failure(const std::exception& error) {
  if (dynamic_cast<const c10::OutOfMemoryError*>(&error) != nullptr) return true;
  const auto* c10_error = dynamic_cast<const c10::Error*>(&error);
  if (c10_error == nullptr) return false;
  const std::string& message = c10_error->msg();
  return message.find("DefaultCPUAllocator: can't allocate memory") != std::string::npos ||
         message.find("DefaultCPUAllocator: not enough memory") != std::string::npos;
}

}  // namespace zenith
