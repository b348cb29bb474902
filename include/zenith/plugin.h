/*
 * Zenith backend plugin C ABI.
 *
 * A backend plugin is a shared library that exports one symbol, `zn_plugin_get_api`, returning a
 * table of function pointers (zn_plugin_api). The host (libzenith) loads plugins with
 * dlopen(RTLD_NOW | RTLD_LOCAL), asks each one which IR node groups it can run (query), compiles the
 * groups it claims into kernels (compile) and runs them (launch).
 *
 * Rules both sides follow:
 *  - Every table and argument struct starts with `struct_size` (the size the writer was built
 *    with). A reader never touches a field that lies beyond the writer's struct_size, and never
 *    calls a function pointer that lies beyond it or is NULL (see ZN_HAS_FIELD). Tables only grow
 *    at their end; a new field means a new ABI minor version.
 *  - The ABI major must match exactly; the plugin's minor may be lower or higher than the host's.
 *  - No C++ exception crosses the boundary. Failures are zn_status objects created through
 *    zn_host_api.status_create; the host owns and frees them. NULL means success.
 *  - Tensors cross as borrowed DLPack DLTensor views (strides always filled, in elements). The
 *    host owns every tensor: inputs, and outputs, which it allocates through PyTorch's caching
 *    allocator with the sizes, strides, dtype and device the IR gives for them before launch. A
 *    kernel that says so at compile (zn_compile_args.provides_outputs, since 1.4) may instead be
 *    asked to hand back memory of its own for an output (zn_launch_args.provided).
 *  - A launch is asynchronous on the stream the host passes (PyTorch's current stream for CUDA,
 *    NULL for the CPU) and must not synchronize the device.
 *  - Groups are described as Zenith IR JSON (docs/trace-format.md, "kind": "group"). A plugin must
 *    copy whatever it keeps from a group: the text is only valid during the call.
 *  - Threads: the host may call query, compile and launch from several threads at once, and may
 *    launch one kernel concurrently on different tensors; a plugin guards its own shared state.
 *  - Lifecycle: init is called once per process; shutdown only after a successful init; a failed
 *    launch leaves its outputs unspecified (the host raises an error and discards them). Errors of
 *    asynchronous device work surface where the stream is next synchronized, as in PyTorch.
 *  - Frozen prefix: the first fields of zn_host_api (struct_size, abi_major, abi_minor, host_ctx,
 *    log) and of zn_plugin_api (struct_size, abi_major, abi_minor, name) never move, in any major
 *    version, so either side can read the other's version and report a mismatch.
 *  - Option strings the host passes are never NULL ("{}" when empty).
 *
 * Versions: 1.0, the first stable version. 1.1 appends zn_compile_args.from_cache. 1.2 gives it a
 * third value, ZN_COMPILE_NOTHING (zn_compile_source). 1.3 appends zn_compile_args.shape_generic and
 * max_extent, so that one kernel can serve a plan whose sizes are symbolic. 1.4 appends
 * zn_compile_args.provides_outputs and zn_launch_args.provided, so that a kernel whose library
 * allocates its results (a dispatcher call) hands them over instead of copying them, and
 * zn_compile_args.graph_safe, so that the host may replay a plan's launches as one CUDA graph.
 * 1.5 appends zn_compile_args.kernel_name, so that profiles and logs name what a step launches.
 * 1.6 appends zn_launch_args.inputs_unwritten, so that a kernel recorded into the host's CUDA graph
 * of a plan may read its weights before the kernels before it have finished.
 */
#ifndef ZENITH_PLUGIN_H
#define ZENITH_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#include <dlpack/dlpack.h>

#ifdef __cplusplus
extern "C" {
#endif

/** ABI major version: a plugin of another major is never loaded. */
#define ZN_ABI_MAJOR 1
/** ABI minor version: grows when a field is appended to a table or argument struct. */
#define ZN_ABI_MINOR 6

/** Name of the one symbol a plugin exports (type: zn_plugin_get_api_fn). */
#define ZN_PLUGIN_ENTRY_SYMBOL "zn_plugin_get_api"

/** DLPack type code of bool tensors (kDLBool = 6 since DLPack 0.8; older headers lack the name). */
#define ZN_DLPACK_BOOL_CODE 6

/** True when `ptr` (a pointer to a size-prefixed struct) was written by a side that knew `field`. */
#define ZN_HAS_FIELD(ptr, type, field) \
  ((ptr)->struct_size >= offsetof(type, field) + sizeof(((type*)0)->field))

/** True when the function pointer `field` of `ptr` may be called: known to the writer and non-NULL. */
#define ZN_CAN_CALL(ptr, type, field) (ZN_HAS_FIELD(ptr, type, field) && (ptr)->field != NULL)

#if defined(_WIN32)
#define ZN_EXPORT __declspec(dllexport)
#else
#define ZN_EXPORT __attribute__((visibility("default")))
#endif

/** Outcome categories of a failed call. */
typedef enum zn_status_code {
  ZN_STATUS_OK = 0,               /**< never carried by a status object; success is NULL */
  ZN_STATUS_INVALID_ARGUMENT = 1, /**< the caller passed something malformed */
  ZN_STATUS_UNSUPPORTED = 2,      /**< the plugin cannot run this group; the host tries the next */
  ZN_STATUS_UNAVAILABLE = 3,      /**< the plugin cannot work here (e.g. no device); skipped */
  ZN_STATUS_INTERNAL = 4,         /**< a bug or an unexpected failure inside the plugin */
  ZN_STATUS_OUT_OF_MEMORY = 5     /**< an allocation failed */
} zn_status_code;

/** Opaque error object, created by the host through zn_host_api.status_create and freed by it. */
typedef struct zn_status zn_status;

/** Opaque compiled kernel, owned by the plugin until kernel_release. */
typedef struct zn_kernel zn_kernel;

/** Log severities for zn_host_api.log. */
typedef enum zn_log_level {
  ZN_LOG_DEBUG = 0,
  ZN_LOG_INFO = 1,
  ZN_LOG_WARN = 2,
  ZN_LOG_ERROR = 3
} zn_log_level;

/** Services the host offers to a plugin. Valid from zn_plugin_get_api until the process ends. */
typedef struct zn_host_api {
  size_t struct_size; /**< sizeof(zn_host_api) as the host was built */
  uint16_t abi_major; /**< the host's ZN_ABI_MAJOR */
  uint16_t abi_minor; /**< the host's ZN_ABI_MINOR */
  void* host_ctx;     /**< pass back as the first argument of every function below */

  /** Writes one line to Zenith's log (ZENITH_LOG decides what is shown). `plugin` names the caller. */
  void (*log)(void* host_ctx, zn_log_level level, const char* plugin, const char* message);

  /** Creates an error to return from a plugin entry. `message` is copied. Never returns NULL.
   *  Create a status only to return it: the host frees what it receives. */
  zn_status* (*status_create)(void* host_ctx, zn_status_code code, const char* message);

  /** Allocates `bytes` of workspace on `device` through PyTorch's caching allocator, ordered on
   *  `stream` (NULL for the CPU). Returns NULL when out of memory. Free with `free`. */
  void* (*alloc)(void* host_ctx, DLDevice device, size_t bytes, void* stream);

  /** Frees memory from `alloc` (named dealloc so that a `free` macro cannot break it). */
  void (*dealloc)(void* host_ctx, DLDevice device, void* ptr);
} zn_host_api;

/** Arguments of zn_plugin_api.query. */
typedef struct zn_query_args {
  size_t struct_size;       /**< sizeof(zn_query_args) as the host was built */
  const char* group_json;   /**< in: the group, Zenith IR JSON ("kind": "group"), UTF-8 */
  size_t group_json_size;   /**< in: bytes in group_json, without a terminator */
  int32_t supported;        /**< out: 1 when the plugin can compile and run the whole group */
  char* reason;             /**< in: buffer for a short reason when unsupported (may be NULL) */
  size_t reason_capacity;   /**< in: bytes in `reason`, including the terminating NUL */
} zn_query_args;

/** Where a compiled kernel came from (zn_compile_args.from_cache). */
typedef enum zn_compile_source {
  ZN_COMPILE_COMPILED = 0,   /**< a compiler ran for it (what a 1.0 plugin reports) */
  ZN_COMPILE_FROM_CACHE = 1, /**< served from a cache: nothing was compiled */
  ZN_COMPILE_NOTHING = 2     /**< (since 1.2) nothing needs compiling: a library or dispatcher call */
} zn_compile_source;

/** Arguments of zn_plugin_api.compile. */
typedef struct zn_compile_args {
  size_t struct_size;       /**< sizeof(zn_compile_args) as the host was built */
  const char* group_json;   /**< in: the group, as for query */
  size_t group_json_size;   /**< in: bytes in group_json */
  const char* options_json; /**< in: options as a JSON object, UTF-8, NUL-terminated; "dump_dir" names
                                 the folder for generated sources ("" when dumps are off) */
  zn_kernel* kernel;        /**< out: the compiled kernel */
  int32_t from_cache;       /**< out (since 1.1): a zn_compile_source; the host counts compiles and
                                  cache hits from it */
  int32_t shape_generic;    /**< out (since 1.3): 1 when the kernel may be launched on tensors whose
                                 sizes and strides differ from the group's, as long as ranks, dtypes
                                 and devices are the same, a size of 1 stays 1 and no other size
                                 becomes 0 or 1. The host never assumes it of a plugin that leaves it
                                 0 (every plugin older than 1.3): it compiles such a group again for
                                 new sizes. */
  int64_t max_extent;       /**< out (since 1.3): with shape_generic, the largest element count the
                                 kernel handles, for the broadcast shape of its tensors and for each
                                 tensor's extent (1 + its largest element offset); 0 means no limit.
                                 Past it the host compiles the group again. */
  int32_t provides_outputs; /**< out (since 1.4): 1 when the kernel's launches accept
                                 zn_launch_args.provided: the kernel can hand back outputs in memory
                                 of its own. The host never passes `provided` to a kernel whose
                                 compile left this 0 (every plugin older than 1.4). */
  int32_t graph_safe;       /**< out (since 1.4): 1 when every launch of the kernel only enqueues
                                 work on args->stream (no other stream, no host copy, no
                                 synchronization, no allocation outside host->alloc), so that the
                                 host may capture it in a CUDA graph and replay it later on other
                                 data at the same addresses. The host never captures a kernel whose
                                 compile left this 0 (every plugin older than 1.4). */
  const char* kernel_name;  /**< out (since 1.5): NULL, or a short NUL-terminated name of what the
                                 kernel launches (a generated function's name, which its dumped
                                 source file carries too, or the library call, e.g. "cublasLt
                                 matmul"), for profiles and logs. It must stay valid until compile
                                 returns; the host copies it. When NULL (every plugin older than
                                 1.5) the host names the kernel after the group's ops. */
} zn_compile_args;

/** Arguments of zn_plugin_api.launch. */
typedef struct zn_launch_args {
  size_t struct_size;        /**< sizeof(zn_launch_args) as the host was built */
  zn_kernel* kernel;         /**< in: a kernel from compile */
  const DLTensor* inputs;    /**< in: the group's inputs, in the group's "inputs" order */
  size_t num_inputs;         /**< in: entries in inputs */
  const DLTensor* outputs;   /**< in: host-allocated outputs in "outputs" order; the kernel writes them.
                                  An output that the group marks as aliasing an input (an in-place
                                  op) is a view of that input's memory. */
  size_t num_outputs;        /**< in: entries in outputs */
  void* stream;              /**< in: cudaStream_t for CUDA devices, NULL for the CPU */
  DLManagedTensor** provided; /**< in/out (since 1.4): NULL, or (only for a kernel whose compile set
                                  provides_outputs) an array of num_outputs entries, all NULL on
                                  entry. For each output o with at least one element whose
                                  outputs[o].data is NULL, the kernel must set provided[o] to a
                                  tensor holding that output: the dtype, device and sizes that
                                  outputs[o] describes, any strides (the host copies it into its
                                  own layout when they differ), ready in stream order on `stream`,
                                  and sharing no memory with an input or another output. The host
                                  takes ownership and calls its deleter when done with it, also when
                                  the launch fails. Outputs with data are written as always. */
  const uint8_t* inputs_unwritten; /**< in (since 1.6): NULL, or num_inputs entries. The host passes
                                  it only while it records a CUDA graph of its own plan on `stream`,
                                  where every launch before this one is the plan's own. An entry is
                                  1 where the input's memory was complete before the graph starts
                                  (a parameter, a buffer, a constant, or a value the host computed
                                  from them before) and no launch recorded into the graph writes it;
                                  such an input may be read before the launches before this one have
                                  finished (a CUDA programmatic dependent launch that reads only those
                                  inputs before it waits for the kernel before it). */
} zn_launch_args;

/** The table a plugin returns. Fields are append-only. */
typedef struct zn_plugin_api {
  size_t struct_size;       /**< sizeof(zn_plugin_api) as the plugin was built */
  uint16_t abi_major;       /**< the plugin's ZN_ABI_MAJOR */
  uint16_t abi_minor;       /**< the plugin's ZN_ABI_MINOR */
  const char* name;         /**< short unique name, e.g. "cpu"; used by ZENITH_BACKENDS */
  const char* version;      /**< the plugin's own version string */
  const char* build_id;     /**< what it was built against (torch version, CUDA), for diagnostics */
  int32_t default_priority; /**< higher runs first: JIT CUDA 300, PyTorch GPU 200, CPU 100 */

  /** Prepares the plugin. `options_json` is a JSON object (may be "{}"). A plugin that cannot work
   *  here returns ZN_STATUS_UNAVAILABLE with the reason; the host logs it and skips the plugin. */
  zn_status* (*init)(const char* options_json, void** plugin_ctx);

  /** Releases everything init made. Called at most once, after all kernels are released. */
  void (*shutdown)(void* plugin_ctx);

  /** Says whether the plugin can run the group. Pure: the same group gives the same answer. */
  zn_status* (*query)(void* plugin_ctx, zn_query_args* args);

  /** Compiles a group the plugin said it supports into a kernel. */
  zn_status* (*compile)(void* plugin_ctx, zn_compile_args* args);

  /** Runs a kernel asynchronously on args->stream. */
  zn_status* (*launch)(void* plugin_ctx, const zn_launch_args* args);

  /** Frees a kernel. */
  void (*kernel_release)(void* plugin_ctx, zn_kernel* kernel);
} zn_plugin_api;

/**
 * The entry point. `host` stays valid for the life of the process. `host_major`/`host_minor` are
 * the host's ABI version (equal to host->abi_major/abi_minor; pass both so that a plugin can decide
 * before reading the table); a plugin that cannot serve that version logs why through host->log and
 * returns NULL.
 */
typedef const zn_plugin_api* (*zn_plugin_get_api_fn)(const zn_host_api* host, uint16_t host_major,
                                                     uint16_t host_minor);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ZENITH_PLUGIN_H */
