/* A well-formed plugin whose init reports ZN_STATUS_UNAVAILABLE, as a GPU plugin does on a machine
 * without a device. The host must log the reason and skip the plugin: it never asks a plugin whose
 * init failed to query, compile or launch, so those abort. shutdown is harmless because the ABI
 * does not say whether a host calls it after a failed init. */
#include <stdlib.h>

#include <zenith/plugin.h>

static const zn_host_api* g_host = NULL;

static zn_status* initfails_init(const char* options_json, void** plugin_ctx) {
  (void)options_json;
  (void)plugin_ctx;
  return g_host->status_create(g_host->host_ctx, ZN_STATUS_UNAVAILABLE,
                               "simulated: no device here");
}

static void initfails_shutdown(void* plugin_ctx) {
  (void)plugin_ctx;
}

static zn_status* initfails_query(void* plugin_ctx, zn_query_args* args) {
  (void)plugin_ctx;
  (void)args;
  abort();
}

static zn_status* initfails_compile(void* plugin_ctx, zn_compile_args* args) {
  (void)plugin_ctx;
  (void)args;
  abort();
}

static zn_status* initfails_launch(void* plugin_ctx, const zn_launch_args* args) {
  (void)plugin_ctx;
  (void)args;
  abort();
}

static void initfails_kernel_release(void* plugin_ctx, zn_kernel* kernel) {
  (void)plugin_ctx;
  (void)kernel;
  abort();
}

static const zn_plugin_api kApi = {
    sizeof(zn_plugin_api),
    ZN_ABI_MAJOR,
    ZN_ABI_MINOR,
    "initfails",
    "0.0.1",
    "test plugin: init fails",
    100,
    initfails_init,
    initfails_shutdown,
    initfails_query,
    initfails_compile,
    initfails_launch,
    initfails_kernel_release,
};

ZN_EXPORT const zn_plugin_api* zn_plugin_get_api(const zn_host_api* host, uint16_t host_major,
                                                 uint16_t host_minor) {
  (void)host_minor;
  if (host == NULL || host_major != ZN_ABI_MAJOR ||
      !ZN_CAN_CALL(host, zn_host_api, status_create)) {
    return NULL;
  }
  g_host = host;
  return &kApi;
}
