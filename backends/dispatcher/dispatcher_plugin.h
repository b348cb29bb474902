// A backend plugin that runs groups through the ATen dispatcher on one device type: the CPU plugin
// (backends/cpu) and the PyTorch GPU plugin (plugins/torch_gpu) are this with different settings.
#pragma once

#include <functional>
#include <string>

#include <c10/core/DeviceType.h>

#include "zenith/plugin.h"

namespace zenith::dispatcher_plugin {

/// What distinguishes one dispatcher-backed plugin from another.
struct Settings {
  const char* name;             ///< plugin name, e.g. "cpu"
  const char* version;          ///< plugin version
  const char* build_id;         ///< what it was built against
  int32_t priority;             ///< default priority
  c10::DeviceType device_type;  ///< the only device it runs tensors on
  /// Empty when the plugin can work in this process, else why not (init then returns UNAVAILABLE).
  std::string (*availability)();
  /// Makes `stream` (from zn_launch_args) current for the duration of a launch; may be null.
  void (*run_on_stream)(void* stream, int device_index, const std::function<void()>& body);
};

/// The table for `settings` (which must outlive the process), after checking the host's version.
const zn_plugin_api* make_api(const Settings& settings, const zn_host_api* host, uint16_t host_major);

}  // namespace zenith::dispatcher_plugin
