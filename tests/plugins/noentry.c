/* A shared library that loads fine but exports no zn_plugin_get_api: the host's dlsym must fail and
 * the loader must skip the library with a message, not crash. The exported function has a
 * near-miss name so that "some symbol is exported" is not what makes the test pass. */
#include <zenith/plugin.h>

ZN_EXPORT const zn_plugin_api* zn_plugin_get_api_v2(const zn_host_api* host, uint16_t host_major,
                                                    uint16_t host_minor) {
  (void)host;
  (void)host_major;
  (void)host_minor;
  return NULL;
}
