/* A plugin built for a future ABI major: its table looks valid but says abi_major
 * ZN_ABI_MAJOR + 1, and it returns the table whatever the host's version is. The host must check
 * abi_major itself and refuse the plugin without calling anything in the table, so every function
 * aborts. */
#include <stdlib.h>

#include <zenith/plugin.h>

static zn_status* wrongmajor_init(const char* options_json, void** plugin_ctx) {
  (void)options_json;
  (void)plugin_ctx;
  abort();
}

static void wrongmajor_shutdown(void* plugin_ctx) {
  (void)plugin_ctx;
  abort();
}

static zn_status* wrongmajor_query(void* plugin_ctx, zn_query_args* args) {
  (void)plugin_ctx;
  (void)args;
  abort();
}

static zn_status* wrongmajor_compile(void* plugin_ctx, zn_compile_args* args) {
  (void)plugin_ctx;
  (void)args;
  abort();
}

static zn_status* wrongmajor_launch(void* plugin_ctx, const zn_launch_args* args) {
  (void)plugin_ctx;
  (void)args;
  abort();
}

static void wrongmajor_kernel_release(void* plugin_ctx, zn_kernel* kernel) {
  (void)plugin_ctx;
  (void)kernel;
  abort();
}

static const zn_plugin_api kApi = {
    sizeof(zn_plugin_api),
    ZN_ABI_MAJOR + 1,
    ZN_ABI_MINOR,
    "wrongmajor",
    "0.0.1",
    "test plugin: wrong ABI major",
    100,
    wrongmajor_init,
    wrongmajor_shutdown,
    wrongmajor_query,
    wrongmajor_compile,
    wrongmajor_launch,
    wrongmajor_kernel_release,
};

ZN_EXPORT const zn_plugin_api* zn_plugin_get_api(const zn_host_api* host, uint16_t host_major,
                                                 uint16_t host_minor) {
  (void)host;
  (void)host_major;
  (void)host_minor;
  return &kApi;
}
