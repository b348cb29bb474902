#include "runtime/out_of_memory.h"

#include "core/allocation_failure.h"
#include "core/backend.h"

namespace zenith::detail {

bool is_out_of_memory(const std::exception& error) {
  return is_allocation_failure(error) || dynamic_cast<const BackendOutOfMemory*>(&error) != nullptr;
}

}  // namespace zenith::detail
