/* What the working test plugins (hostsync.c, launchfails.c) share: they keep no state, so init,
 * shutdown and kernel release do nothing, and they decide what to claim by counting substrings of
 * the group's JSON. Header-only: each plugin is one library of its own. */
#ifndef ZENITH_TESTS_PLUGINS_STATELESS_PLUGIN_H
#define ZENITH_TESTS_PLUGINS_STATELESS_PLUGIN_H

#include <string.h>

#include <zenith/plugin.h>

/* Occurrences of `needle` in the first `size` bytes of `text`. */
static inline size_t stateless_count(const char* text, size_t size, const char* needle) {
  size_t found = 0, length = strlen(needle);
  for (size_t i = 0; i + length <= size; ++i) found += memcmp(text + i, needle, length) == 0;
  return found;
}

static inline zn_status* stateless_init(const char* options_json, void** plugin_ctx) {
  (void)options_json;
  *plugin_ctx = NULL;
  return NULL;
}

static inline void stateless_shutdown(void* plugin_ctx) { (void)plugin_ctx; }

static inline void stateless_kernel_release(void* plugin_ctx, zn_kernel* kernel) {
  (void)plugin_ctx;
  (void)kernel;
}

#endif
