/* A plugin whose launches fail midway: it claims float32 groups on the CPU that hold an
 * `aten::relu`, compiles them, and at launch writes NaN over the first half of its output before returning
 * ZN_STATUS_INTERNAL "simulated launch failure". The tests check that such a failure mid-plan
 * reaches the caller as a zenith::Error naming the plugin, that nothing of that call is returned
 * (the half-written output included), and that earlier results and the call's arguments are
 * untouched. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <zenith/plugin.h>

#include "stateless_plugin.h"

static const zn_host_api* g_host = NULL;

static zn_status* launchfails_query(void* plugin_ctx, zn_query_args* args) {
  (void)plugin_ctx;
  const char* json = args->group_json;
  size_t size = args->group_json_size;
  args->supported = stateless_count(json, size, "\"op\":\"aten::relu\"") > 0 &&
                    stateless_count(json, size, "\"cpu") > 0 && stateless_count(json, size, "\"float32\"") > 0;
  if (!args->supported && args->reason != NULL && args->reason_capacity > 0) {
    snprintf(args->reason, args->reason_capacity, "launchfails takes float32 CPU groups with a relu only");
  }
  return NULL;
}

static zn_status* launchfails_compile(void* plugin_ctx, zn_compile_args* args) {
  (void)plugin_ctx;
  static int kernel; /* stateless: every group is the same relu */
  args->kernel = (zn_kernel*)&kernel;
  return NULL;
}

static zn_status* launchfails_launch(void* plugin_ctx, const zn_launch_args* args) {
  (void)plugin_ctx;
  for (size_t k = 0; k < args->num_outputs; ++k) {
    const DLTensor* out = &args->outputs[k];
    size_t n = 1;
    for (int d = 0; d < out->ndim; ++d) n *= (size_t)out->shape[d];
    float* data = (float*)((char*)out->data + out->byte_offset); /* the plan allocates outputs contiguous */
    for (size_t i = 0; i < n / 2; ++i) data[i] = NAN;
  }
  return g_host->status_create(g_host->host_ctx, ZN_STATUS_INTERNAL, "simulated launch failure");
}

static const zn_plugin_api kApi = {
    sizeof(zn_plugin_api),
    ZN_ABI_MAJOR,
    ZN_ABI_MINOR,
    "launchfails",
    "0.0.1",
    "test plugin: relu launches that fail after writing half their output",
    50,
    stateless_init,
    stateless_shutdown,
    launchfails_query,
    launchfails_compile,
    launchfails_launch,
    stateless_kernel_release,
};

ZN_EXPORT const zn_plugin_api* zn_plugin_get_api(const zn_host_api* host, uint16_t host_major,
                                                 uint16_t host_minor) {
  (void)host_minor;
  if (host == NULL || host_major != ZN_ABI_MAJOR || !ZN_CAN_CALL(host, zn_host_api, status_create)) return NULL;
  g_host = host;
  return &kApi;
}
