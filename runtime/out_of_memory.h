// Out of memory during a plan, recognized so that the caller gets a zenith::Error that says so (or
// an eager run, CompileOptions::eager_on_out_of_memory) instead of a backend's internal failure.
#pragma once

#include <exception>

namespace zenith::detail {

/// Whether `error` means memory ran out: an allocation on the host's side of the plugin ABI failed
/// (core/allocation_failure.h), or a backend reported ZN_STATUS_OUT_OF_MEMORY (BackendOutOfMemory).
bool is_out_of_memory(const std::exception& error);

}  // namespace zenith::detail
