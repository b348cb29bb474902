/* A plugin whose table's struct_size ends just before `init`, as if written by a plugin that knew
 * only the descriptive fields. The function pointers after that are filled (with functions that
 * abort) so a host that checks only for NULL, not struct_size, crashes the test instead of passing
 * by luck. The host must load the name and priority and call nothing. */
#include <stdlib.h>

#include <zenith/plugin.h>

static zn_status* shorttable_init(const char* options_json, void** plugin_ctx) {
  (void)options_json;
  (void)plugin_ctx;
  abort();
}

static void shorttable_shutdown(void* plugin_ctx) {
  (void)plugin_ctx;
  abort();
}

static zn_status* shorttable_query(void* plugin_ctx, zn_query_args* args) {
  (void)plugin_ctx;
  (void)args;
  abort();
}

static zn_status* shorttable_compile(void* plugin_ctx, zn_compile_args* args) {
  (void)plugin_ctx;
  (void)args;
  abort();
}

static zn_status* shorttable_launch(void* plugin_ctx, const zn_launch_args* args) {
  (void)plugin_ctx;
  (void)args;
  abort();
}

static void shorttable_kernel_release(void* plugin_ctx, zn_kernel* kernel) {
  (void)plugin_ctx;
  (void)kernel;
  abort();
}

static const zn_plugin_api kApi = {
    offsetof(zn_plugin_api, init),
    ZN_ABI_MAJOR,
    ZN_ABI_MINOR,
    "shorttable",
    "0.0.1",
    "test plugin: table ends before init",
    100,
    shorttable_init,
    shorttable_shutdown,
    shorttable_query,
    shorttable_compile,
    shorttable_launch,
    shorttable_kernel_release,
};

ZN_EXPORT const zn_plugin_api* zn_plugin_get_api(const zn_host_api* host, uint16_t host_major,
                                                 uint16_t host_minor) {
  (void)host;
  (void)host_minor;
  return host_major == ZN_ABI_MAJOR ? &kApi : NULL;
}
