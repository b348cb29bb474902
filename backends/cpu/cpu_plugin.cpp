// The CPU backend plugin: runs any ATen op on CPU tensors through the dispatcher, so that every
// traceable model runs. It accepts every CPU group and is the reference the conformance test
// compares other plugins against.
#include "backends/dispatcher/dispatcher_plugin.h"

namespace {

const zenith::dispatcher_plugin::Settings kSettings = {
    /*name=*/"cpu",
    /*version=*/"0.1.0",
    /*build_id=*/"torch " ZENITH_TORCH_VERSION,
    /*priority=*/100,
    /*device_type=*/c10::DeviceType::CPU,
    /*availability=*/nullptr,
    /*run_on_stream=*/nullptr,
};

}  // namespace

extern "C" ZN_EXPORT const zn_plugin_api* zn_plugin_get_api(const zn_host_api* host, uint16_t major, uint16_t) {
  return zenith::dispatcher_plugin::make_api(kSettings, host, major);
}
