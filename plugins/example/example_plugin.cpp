// The ABI side of the example plugin: the entry point, the function table, and the rules every
// Zenith plugin must follow at the boundary (struct_size checks, status objects instead of
// exceptions, borrowed tensors). The interesting work lives in group_parser.cpp and
// fused_kernel.cpp; a plugin author usually keeps this file and swaps those two.
#include <zenith/plugin.h>

#include <nlohmann/json.hpp>  // only for its version macros, in kBuildId

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <new>
#include <string>

#include "fused_kernel.h"
#include "group_parser.h"
#include "program.h"

// The kernel handle is opaque to the host; defining it here is what makes it ours.
struct zn_kernel {
  zn_example::Program program;
};

namespace {

constexpr const char* kPluginName = "example";

#define ZN_EXAMPLE_STR2(x) #x
#define ZN_EXAMPLE_STR(x) ZN_EXAMPLE_STR2(x)
#if defined(__clang__)
#define ZN_EXAMPLE_COMPILER "clang " __clang_version__
#elif defined(__GNUC__)
#define ZN_EXAMPLE_COMPILER "gcc " __VERSION__
#else
#define ZN_EXAMPLE_COMPILER "unknown compiler"
#endif

// Shown in diagnostics when the host lists plugins, so a mismatch in what a binary was built
// against can be spotted without a debugger.
constexpr const char kBuildId[] =
    "zenith plugin ABI " ZN_EXAMPLE_STR(ZN_ABI_MAJOR) "." ZN_EXAMPLE_STR(ZN_ABI_MINOR)
    ", DLPack " ZN_EXAMPLE_STR(DLPACK_VERSION)
    ", nlohmann_json " ZN_EXAMPLE_STR(NLOHMANN_JSON_VERSION_MAJOR) "." ZN_EXAMPLE_STR(
        NLOHMANN_JSON_VERSION_MINOR) "." ZN_EXAMPLE_STR(NLOHMANN_JSON_VERSION_PATCH)
    ", " ZN_EXAMPLE_COMPILER;

// The host table stays valid until the process ends, and every entry point needs it to create
// status objects, so one static is simpler than threading it through plugin_ctx.
const zn_host_api* g_host = nullptr;

// Per-init state. This plugin needs none for its work; the count only feeds a shutdown warning that
// catches hosts (or tests) that leak kernels.
struct PluginContext {
  std::atomic<long> live_kernels{0};
};

void host_log(zn_log_level level, const char* message) noexcept {
  if (g_host != nullptr && ZN_CAN_CALL(g_host, zn_host_api, log)) {
    g_host->log(g_host->host_ctx, level, kPluginName, message);
  }
}

// zn_plugin_get_api refuses hosts without status_create, so g_host->status_create is callable here.
zn_status* make_status(zn_status_code code, const char* message) noexcept {
  return g_host->status_create(g_host->host_ctx, code, message);
}

zn_status* make_status(zn_status_code code, const std::string& message) noexcept {
  return make_status(code, message.c_str());
}

zn_status* struct_too_small(const char* type, size_t struct_size) noexcept {
  // A literal buffer rather than std::string: this must not throw.
  char message[160];
  std::snprintf(message, sizeof message,
                "%s.struct_size %zu is too small for the fields this call needs", type,
                struct_size);
  return make_status(ZN_STATUS_INVALID_ARGUMENT, message);
}

// Every entry point runs its body through this: no exception may cross the C ABI, whatever happens.
template <typename Body>
zn_status* guarded(Body&& body) noexcept {
  try {
    return body();
  } catch (const zn_example::GroupError& e) {
    const bool malformed = e.refusal() == zn_example::Refusal::Malformed;
    return make_status(malformed ? ZN_STATUS_INVALID_ARGUMENT : ZN_STATUS_UNSUPPORTED, e.what());
  } catch (const std::bad_alloc&) {
    return make_status(ZN_STATUS_OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception& e) {
    return make_status(ZN_STATUS_INTERNAL, e.what());
  } catch (...) {
    return make_status(ZN_STATUS_INTERNAL, "unknown exception");
  }
}

// Truncates rather than fails: the reason is a diagnostic, and a short buffer is the host's choice.
void write_reason(zn_query_args* args, const std::string& reason) noexcept {
  if (!ZN_HAS_FIELD(args, zn_query_args, reason_capacity) || args->reason == nullptr ||
      args->reason_capacity == 0) {
    return;
  }
  const size_t length = std::min(reason.size(), args->reason_capacity - 1);
  std::memcpy(args->reason, reason.data(), length);
  args->reason[length] = '\0';
}

// This plugin takes no options, so options_json is not read; a plugin with options would parse it
// here and refuse unknown keys with ZN_STATUS_INVALID_ARGUMENT.
zn_status* example_init(const char* /*options_json*/, void** plugin_ctx) noexcept {
  return guarded([&]() -> zn_status* {
    if (plugin_ctx == nullptr) return make_status(ZN_STATUS_INVALID_ARGUMENT, "plugin_ctx is NULL");
    *plugin_ctx = new PluginContext();
    return nullptr;
  });
}

void example_shutdown(void* plugin_ctx) noexcept {
  auto* context = static_cast<PluginContext*>(plugin_ctx);
  if (context == nullptr) return;
  if (context->live_kernels.load() != 0) {
    host_log(ZN_LOG_WARN,
             "shutdown while kernels are still alive; the host must release them first");
  }
  delete context;
}

zn_status* example_query(void* /*plugin_ctx*/, zn_query_args* args) noexcept {
  return guarded([&]() -> zn_status* {
    if (args == nullptr) return make_status(ZN_STATUS_INVALID_ARGUMENT, "query args are NULL");
    if (!ZN_HAS_FIELD(args, zn_query_args, supported)) {
      return struct_too_small("zn_query_args", args->struct_size);
    }
    args->supported = 0;
    try {
      zn_example::parse_group(args->group_json, args->group_json_size);
    } catch (const zn_example::GroupError& e) {
      // Unsupported is a normal answer, not an error: the host just asks the next plugin.
      if (e.refusal() == zn_example::Refusal::Malformed) throw;
      write_reason(args, e.what());
      return nullptr;
    }
    args->supported = 1;
    write_reason(args, "");
    return nullptr;
  });
}

zn_status* example_compile(void* plugin_ctx, zn_compile_args* args) noexcept {
  return guarded([&]() -> zn_status* {
    if (args == nullptr) return make_status(ZN_STATUS_INVALID_ARGUMENT, "compile args are NULL");
    if (!ZN_HAS_FIELD(args, zn_compile_args, kernel)) {
      return struct_too_small("zn_compile_args", args->struct_size);
    }
    auto* context = static_cast<PluginContext*>(plugin_ctx);
    if (context == nullptr) return make_status(ZN_STATUS_INVALID_ARGUMENT, "plugin_ctx is NULL");
    args->kernel = nullptr;
    // The group text dies with this call; the Program is a copy of everything the kernel needs.
    auto* kernel = new zn_kernel{zn_example::parse_group(args->group_json, args->group_json_size)};
    // zn_compile_args.shape_generic (ABI 1.3) stays 0: check_tensors holds every launch to the
    // group's exact sizes, so for a symbolic plan the host compiles the group again per size. A
    // plugin whose kernels read sizes at launch sets it to 1 (and max_extent to its limit).
    context->live_kernels.fetch_add(1);
    args->kernel = kernel;
    return nullptr;
  });
}

// A CPU launch gets a NULL stream and nothing to be asynchronous against, so it runs right here on
// the caller's thread. A GPU plugin would instead enqueue on args->stream and return at once.
zn_status* example_launch(void* /*plugin_ctx*/, const zn_launch_args* args) noexcept {
  return guarded([&]() -> zn_status* {
    if (args == nullptr) return make_status(ZN_STATUS_INVALID_ARGUMENT, "launch args are NULL");
    if (!ZN_HAS_FIELD(args, zn_launch_args, num_outputs)) {
      return struct_too_small("zn_launch_args", args->struct_size);
    }
    if (args->kernel == nullptr) return make_status(ZN_STATUS_INVALID_ARGUMENT, "kernel is NULL");
    const zn_example::Program& program = args->kernel->program;
    const std::string problem = zn_example::check_tensors(program, args->inputs, args->num_inputs,
                                                          args->outputs, args->num_outputs);
    if (!problem.empty()) return make_status(ZN_STATUS_INVALID_ARGUMENT, problem);
    zn_example::run_fused(program, args->inputs, args->outputs);
    return nullptr;
  });
}

void example_kernel_release(void* plugin_ctx, zn_kernel* kernel) noexcept {
  if (kernel == nullptr) return;
  delete kernel;
  if (auto* context = static_cast<PluginContext*>(plugin_ctx)) context->live_kernels.fetch_sub(1);
}

// Filled by name rather than positionally so the table cannot silently shift if fields are added.
zn_plugin_api make_api() noexcept {
  zn_plugin_api api{};
  api.struct_size = sizeof(zn_plugin_api);
  api.abi_major = ZN_ABI_MAJOR;
  api.abi_minor = ZN_ABI_MINOR;
  api.name = kPluginName;
  api.version = "1.0.0";
  api.build_id = kBuildId;
  api.default_priority = 150;  // above the CPU plugin (100), below the GPU ones (200, 300)
  api.init = &example_init;
  api.shutdown = &example_shutdown;
  api.query = &example_query;
  api.compile = &example_compile;
  api.launch = &example_launch;
  api.kernel_release = &example_kernel_release;
  return api;
}

}  // namespace

extern "C" ZN_EXPORT const zn_plugin_api* zn_plugin_get_api(const zn_host_api* host,
                                                            uint16_t host_major,
                                                            uint16_t host_minor) noexcept {
  if (host == nullptr) return nullptr;
  if (host_major != ZN_ABI_MAJOR) {
    // Only log may be used on a host of another major: nothing else in its table is known to us.
    if (ZN_CAN_CALL(host, zn_host_api, log)) {
      char message[128];
      std::snprintf(message, sizeof message,
                    "host ABI %u.%u is not supported: this plugin was built for ABI %d.%d",
                    unsigned{host_major}, unsigned{host_minor}, ZN_ABI_MAJOR, ZN_ABI_MINOR);
      host->log(host->host_ctx, ZN_LOG_ERROR, kPluginName, message);
    }
    return nullptr;
  }
  // Without status_create no entry point could report a failure, so refuse up front. A host of an
  // older or newer minor is fine: struct_size checks cover the fields that differ.
  if (!ZN_CAN_CALL(host, zn_host_api, status_create)) {
    if (ZN_CAN_CALL(host, zn_host_api, log)) {
      host->log(host->host_ctx, ZN_LOG_ERROR, kPluginName, "the host table has no status_create");
    }
    return nullptr;
  }
  g_host = host;
  static const zn_plugin_api api = make_api();
  return &api;
}

// Fails to compile if the entry point's signature drifts from the ABI's typedef.
[[maybe_unused]] constexpr zn_plugin_get_api_fn kEntryMatchesAbi = &zn_plugin_get_api;
