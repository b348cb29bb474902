// Plugin-side helpers shared by Zenith's own plugins (the dispatcher-backed ones and jit_cuda):
// nothing may cross the C ABI as an exception, and refusals fit the host's reason buffer. The
// example plugin has its own copy on purpose: it is the template that depends on nothing.
#pragma once

#include <exception>
#include <new>
#include <string>

#include <c10/util/Exception.h>
#include <fmt/format.h>

#include "core/allocation_failure.h"
#include "zenith/plugin.h"

namespace zenith::plugin_side {

/// A status for the host to free.
inline zn_status* make_status(const zn_host_api* host, zn_status_code code, const std::string& message) {
  return host->status_create(host->host_ctx, code, message.c_str());
}

/// Runs `body` (returning zn_status*), turning any exception into a status. LibTorch errors keep
/// their message without the C++ backtrace; an allocator's failure is ZN_STATUS_OUT_OF_MEMORY.
template <typename Body>
zn_status* guarded(const zn_host_api* host, Body&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return make_status(host, ZN_STATUS_OUT_OF_MEMORY, "out of memory");
  } catch (const c10::Error& error) {
    return make_status(host, is_allocation_failure(error) ? ZN_STATUS_OUT_OF_MEMORY : ZN_STATUS_INTERNAL,
                       error.what_without_backtrace());
  } catch (const std::exception& error) {
    return make_status(host, ZN_STATUS_INTERNAL, error.what());
  } catch (...) {
    return make_status(host, ZN_STATUS_INTERNAL, "unknown exception");
  }
}

/// Answers a query: supported when `why` is empty, else declined with `why` (cut to the buffer).
inline void answer_query(zn_query_args* args, const std::string& why) {
  args->supported = why.empty() ? 1 : 0;
  if (!why.empty() && args->reason != nullptr && args->reason_capacity > 0) {
    auto written = fmt::format_to_n(args->reason, args->reason_capacity - 1, "{}", why);
    *written.out = '\0';
  }
}

}  // namespace zenith::plugin_side
