#include "core/host_api.h"

#include <mutex>
#include <unordered_set>

#include <c10/core/Allocator.h>

#include "core/dlpack_view.h"
#include "core/log.h"

struct zn_status {
  zn_status_code code;
  std::string message;
};

namespace zenith {
namespace {

// Statuses the host made and has not freed: lets take_status refuse a pointer it never created.
std::mutex live_mutex;
std::unordered_set<const zn_status*>& live_statuses() {
  static auto* set = new std::unordered_set<const zn_status*>();
  return *set;
}

void host_log(void*, zn_log_level level, const char* plugin, const char* message) {
  auto text = fmt::format("plugin {}: {}", plugin ? plugin : "?", message ? message : "");
  switch (level) {
    case ZN_LOG_DEBUG: log::debug("{}", text); break;
    case ZN_LOG_INFO: log::info("{}", text); break;
    case ZN_LOG_WARN: log::warn("{}", text); break;
    default: log::error("{}", text); break;
  }
}

zn_status* host_status_create(void*, zn_status_code code, const char* message) {
  auto* status = new zn_status{code, message ? message : ""};
  std::lock_guard<std::mutex> lock(live_mutex);
  live_statuses().insert(status);
  return status;
}

void* host_alloc(void*, DLDevice device, size_t bytes, void*) {
  try {
    return c10::GetAllocator(from_dlpack_device(device).type())->raw_allocate(bytes);
  } catch (const std::exception& error) {
    log::error("plugin workspace allocation of {} bytes failed: {}", bytes, error.what());
    return nullptr;
  }
}

void host_dealloc(void*, DLDevice device, void* ptr) {
  if (ptr != nullptr) c10::GetAllocator(from_dlpack_device(device).type())->raw_deallocate(ptr);
}

}  // namespace

const zn_host_api* host_api() {
  static const zn_host_api api = {
      sizeof(zn_host_api), ZN_ABI_MAJOR, ZN_ABI_MINOR, nullptr, host_log, host_status_create, host_alloc, host_dealloc,
  };
  return &api;
}

StatusReport take_status(zn_status* status) {
  if (status == nullptr) return {};
  {
    std::lock_guard<std::mutex> lock(live_mutex);
    if (live_statuses().erase(status) == 0) {
      return {ZN_STATUS_INTERNAL, "the plugin returned a status the host did not create (use host->status_create)"};
    }
  }
  StatusReport report{status->code, std::move(status->message)};
  delete status;
  return report;
}

const char* status_code_name(zn_status_code code) {
  switch (code) {
    case ZN_STATUS_OK: return "OK";
    case ZN_STATUS_INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case ZN_STATUS_UNSUPPORTED: return "UNSUPPORTED";
    case ZN_STATUS_UNAVAILABLE: return "UNAVAILABLE";
    case ZN_STATUS_INTERNAL: return "INTERNAL";
    case ZN_STATUS_OUT_OF_MEMORY: return "OUT_OF_MEMORY";
  }
  return "UNKNOWN";
}

}  // namespace zenith
