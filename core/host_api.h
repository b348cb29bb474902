// The host side of the plugin ABI: the services table plugins call, and status objects.
#pragma once

#include <string>

#include "zenith/plugin.h"

namespace zenith {

/// The process-wide table handed to every plugin.
const zn_host_api* host_api();

/// A status a plugin returned, read and freed.
struct StatusReport {
  zn_status_code code = ZN_STATUS_OK;
  std::string message;
};

/// Reads and frees `status` (NULL gives code OK). A status the host did not create is reported as
/// an internal error rather than read.
StatusReport take_status(zn_status* status);

/// The name of a status code, e.g. "UNSUPPORTED".
const char* status_code_name(zn_status_code code);

}  // namespace zenith
