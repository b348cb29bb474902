// Options and reports of zenith::compile: plain data, no LibTorch headers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace zenith {

/// How much Zenith writes to stderr.
enum class LogLevel { Debug = 0, Info = 1, Warn = 2, Error = 3, Off = 4 };

/// A dimension of a forward argument made symbolic: one plan serves every size of it.
struct DynamicDim {
  int argument = 0;  ///< position of the tensor among forward's arguments (0 is the first)
  int dim = 0;       ///< the dimension; negative counts from the last
};

/// How a compiled module meets sizes it has not seen (docs/dynamic-shapes.md).
enum class DynamicShapes {
  /// Every new exact signature is captured and planned again (a "recapture").
  Off,
  /// CompileOptions::dynamic_dims are symbolic from the first call; any other dimension becomes
  /// symbolic once a call differs from the previous capture only in the sizes of tensor arguments.
  /// A symbolic plan is fitted from a few extra captures at nearby sizes; later sizes are served by
  /// substituting them into that plan, without capture, passes or compiles.
  Auto,
};

/// Options of zenith::compile. Environment variables override some of them (named per field).
struct CompileOptions {
  /// Backend names in priority order ("cpu", "example", ...); only these are used. Empty: every
  /// plugin found, by its default priority. Overridden by ZENITH_BACKENDS=name,name.
  std::vector<std::string> backends;
  /// Plugin files or folders searched before ZENITH_PLUGIN_PATH, the install folder and the folder
  /// of libzenith.
  std::vector<std::string> plugin_paths;
  /// Folder for JSON trace dumps, one per new plan; empty writes none. Overridden by ZENITH_DUMP_DIR.
  std::string dump_dir;
  /// Runs the eager module beside the first `verify_calls` calls served by a plan and throws a
  /// zenith::Error when an output differs by more than atol + rtol * |eager|. Training calls are
  /// not verified: running the forward again would repeat its effects (batch-norm statistics,
  /// dropout's random numbers).
  int verify_calls = 0;
  /// Relative tolerance of verify.
  double verify_rtol = 1e-5;
  /// Absolute tolerance of verify.
  double verify_atol = 1e-6;
  /// Log threshold. Overridden by ZENITH_LOG=debug|info|warn|error|off.
  LogLevel log_level = LogLevel::Warn;
  /// Plans kept per compiled module (least recently used evicted first). At least 1.
  std::size_t plan_cache_size = 16;
  /// Dynamic shapes. Overridden by ZENITH_DYNAMIC=off|auto.
  DynamicShapes dynamic_shapes = DynamicShapes::Auto;
  /// Dimensions symbolic from the first call (with DynamicShapes::Auto).
  std::vector<DynamicDim> dynamic_dims;
  /// Symbolic plans kept per compiled module (least recently used dropped first). At least 1.
  std::size_t symbolic_plan_limit = 4;
  /// Runs every call eagerly. Overridden by ZENITH_DISABLE=1.
  bool disable = false;
  /// Compiles calls that need gradients (grad mode on and an input or parameter requiring one):
  /// the call becomes one autograd node running a compiled forward and a compiled backward.
  /// When false, such calls run eagerly. Overridden by ZENITH_TRAINING=0|1.
  bool compile_training = true;
  /// Replays each compiled plan on a CUDA device as one CUDA graph: a training step's forward and
  /// backward from their second call on, an inference plan from its signature's third call (the
  /// first is the capture, the second runs launch by launch); the launches cost the host one
  /// launch. Inference graphs copy the call's tensors into buffers of their own and copy every
  /// result out, so results a caller keeps are never overwritten; parameters and buffers are read
  /// where they lie. A call whose parameters moved or whose previous outputs are still held runs
  /// launch by launch instead (never wrong, only slower); CacheStats counts both. A symbolic plan's
  /// instance (a new size) is graphed at its own second call. Plans with value checks, plans that
  /// write into or return their arguments, and plans of one kernel launch run launch by launch.
  /// Memory: the inference graphs of one compiled module share one CUDA memory pool and keep none
  /// of it between replays (every replay copies its inputs in and its results out), so a module
  /// with a graph per size (a cache that grows a token per call) needs about one graph's memory,
  /// not one per size; in exchange its graphs replay one at a time, whichever streams call them.
  /// A training step's forward and backward keep their memory between calls (saved values wait
  /// there for the backward). Overridden by ZENITH_CUDA_GRAPHS=0|1.
  bool cuda_graphs = true;
  /// Runs the convolutions of a compiled plan on a CUDA device channels-last (NHWC), training
  /// steps and inference alike: cuDNN's float32 kernels work in that layout, so eager's NCHW
  /// convolutions pay for transposes around each one, and its NHWC batch norm kernels are faster.
  /// The call's tensor is converted once and the layout carried through every convolution, batch
  /// norm, activation, residual add and pooling after it; in inference the weights' channels-last
  /// copies are derived values (keep_derived_values), made once. The values match eager's to
  /// float32 rounding, but not bit for bit: cuDNN's NHWC kernels sum in another order (gradient
  /// norms of a ResNet-50 step differ by up to 6e-4 relative, against 9e-5 with it off). Declined
  /// for a call returning a 4-D tensor, and in training for batch norm in eval mode. Overridden by
  /// ZENITH_CHANNELS_LAST=0|1.
  bool channels_last = true;
  /// Inference plans keep what they compute from parameters and buffers alone (a weight copied
  /// into another layout, a transposed weight, the q, k and v weights concatenated for one
  /// product) between calls, instead of computing it at every call, and compute it again at the
  /// first call after a source changed: updated in place (its version counter moved) or replaced
  /// by another tensor. The plans of every signature share one copy of a value derived the same
  /// way. The kept values cost device memory (the channels-last copy of every convolution weight
  /// of an NCHW network, or of every one whose batch norm is folded into it; a decoder's
  /// concatenated projection weights, 1.24 GB for a TinyLlama-sized one, unless pack_parameters
  /// moves the weights into them; a convolution weight's copies only where kept_weight_fraction
  /// allows; CacheStats counts their computations and, in kept_bytes, their memory). Off,
  /// projections of one input stay apart and batch norms are not folded. A
  /// write that bypasses the version counter is not seen: writing through `.data`
  /// (`p.data().copy_(...)`) or through a raw pointer. Update parameters with `p.copy_(...)` under
  /// torch::NoGradGuard, as optimizers do, or turn this off. Overridden by ZENITH_KEEP_DERIVED=0|1.
  bool keep_derived_values = true;
  /// With keep_derived_values: a convolution's weight is kept folded with its batch norm, or
  /// channels-last, only where it has at most this many times the elements of the activation the
  /// convolution writes; other convolutions read the weight as it is. Their batch norm then runs
  /// after them, or, in float16 and bfloat16 channels-last on CUDA where the weight has at most
  /// 10.5 times the elements of the activation, as a per-channel scale and shift in cuDNN's
  /// epilogue (zenith::convolution_scale_relu: no copy), or, where the input is channels-last and
  /// the weight is not (the convolution would copy the weight channels-last at every call), folded
  /// into that per-call copy by one kernel (the copy is not kept). The copies cost memory eager
  /// never needs and pay where the activation is large (the fused epilogue saves a pass over
  /// it). At 0.1 the bench's ResNet-50 keeps 0.3 MB of copies in float16 at batch 1 (40 MB with
  /// every copy) and 9.4 MB at batch 64. On an H200 its batch-1 call then peaks where eager's
  /// does (float16 channels-last: 6.5 MB above the weights against eager's 7.5; float32: 13.0
  /// against 13.0, with and without the per-call folds); in float16 it took 0.418 to 0.478 ms in
  /// eight processes with the scale and shift in cuDNN's epilogue (torch.compile reduce-overhead
  /// 0.508 in the same call), where every copy kept took 0.391 in another (docs/performance.md
  /// has float32 and batch 64).
  /// Infinity keeps every copy (the fastest call, the most memory); 0 keeps none. Not negative.
  /// Overridden by ZENITH_KEPT_WEIGHT_FRACTION (a number, or inf).
  double kept_weight_fraction = 0.1;
  /// With keep_derived_values: parameters whose concatenation a plan keeps (the q, k and v weights
  /// of one attention, an MLP's gate and up weights) are moved into that concatenation, one after
  /// another, so that it costs no memory of its own (runtime/parameter_packing.h). Each such
  /// parameter keeps its values, sizes, strides, dtype and autograd state and gets another address
  /// (data_ptr), at the first call of a signature whose plan keeps the concatenation, while no
  /// other call of the compiled module is in flight; an update in place (an optimizer step,
  /// copy_) then updates the concatenation too. A parameter whose memory another tensor shares
  /// (a view of it, a detached alias) is not moved, and the plan keeps a copy (logged at info).
  /// Do not run the module's eager forward on another thread while its compiled form makes its
  /// first calls. Memory: on a device the parameters' values go through pinned host memory and
  /// their device memory is freed before the concatenation is allocated, so packing never holds a
  /// parameter twice (a TinyLlama-sized decoder's first call peaked 44 MB higher when it did); and
  /// after each concatenation the caching allocator's unused memory, that old memory among it, goes
  /// back to the device (what c10::cuda::CUDACachingAllocator::emptyCache does, once per
  /// concatenation at a signature's first call), so that the old memory is not kept reserved beside
  /// the new. If the concatenation cannot be allocated, each parameter gets memory of its own and
  /// its values back and the plan keeps a copy instead; if not even that memory can be had, the
  /// call throws zenith::Error (those parameters are empty then, and the module cannot run).
  /// CacheStats counts what was moved. Overridden by ZENITH_PACK_PARAMETERS=0|1.
  bool pack_parameters = true;
  /// When a signature cannot be compiled (an unsupported construct, no backend for an op), run it
  /// eagerly and log why once; likewise a call whose plan's value check fails (a value the forward
  /// read into C++ differs from the capture's). When false, throw a zenith::Error instead.
  bool fallback_to_eager = true;
  /// A call whose plan runs out of memory (an allocation fails on its device, CUDA or CPU) throws
  /// a zenith::Error saying so; nothing of that call is returned and the compiled module stays
  /// usable. When true, such a call runs eagerly instead, with a warning (once per module), which
  /// helps where the plan needs more memory at once than eager (eager may run out too). Training
  /// calls always throw: their plan may have updated batch-norm statistics before it stopped.
  bool eager_on_out_of_memory = false;
  /// Folder for replay profiles; empty writes none. Overridden by ZENITH_PROFILE_DIR. Each plan's
  /// first `profile_calls` runs are timed step by step (host time, and device time from events on
  /// the step's stream) and written, after each profiled run, to one trace per signature,
  /// "<name>-<signature hash>.trace.json" beside its dump's name, which Perfetto and
  /// chrome://tracing open (docs/profiling.md). A profiled run first waits for the work already
  /// queued on its device, so profile a few calls, not a whole job. Training calls are not profiled.
  std::string profile_dir;
  /// Runs of each plan that a profile records (with profile_dir). At least 1.
  int profile_calls = 3;
  /// Name used in logs and dump file names.
  std::string name = "module";
  /// Largest tensor constant, in bytes, whose data a dump writes (larger ones are written as
  /// metadata and cannot be replayed).
  std::size_t dump_constant_limit = 1 << 20;
};

/// Statistics of one pass run.
struct PassReport {
  std::string name;                          ///< the pass
  std::int64_t nodes_before = 0;             ///< nodes when it started
  std::int64_t nodes_after = 0;              ///< nodes when it finished
  double milliseconds = 0;                   ///< wall time
  std::map<std::string, std::int64_t> counters;  ///< pass-specific counts (e.g. "folded")
};

/// Plan cache counters of one compiled module.
struct CacheStats {
  std::int64_t hits = 0;         ///< calls served by a cached plan
  std::int64_t misses = 0;       ///< calls that captured a new signature
  std::int64_t recaptures = 0;   ///< misses after the first capture (each logs, at info level, what changed)
  std::int64_t evictions = 0;    ///< plans dropped to respect plan_cache_size
  std::int64_t eager_calls = 0;  ///< calls run eagerly (disabled, compile_training off, fallback)
  std::int64_t training_calls = 0;  ///< calls run as one autograd node with a compiled backward
  std::int64_t graph_captures = 0;   ///< CUDA graphs captured (CompileOptions::cuda_graphs)
  std::int64_t graph_replays = 0;    ///< plan runs served by replaying a CUDA graph
  std::int64_t graph_plain_runs = 0; ///< plan runs with a graph held that ran launch by launch (inputs moved, outputs held)
  std::int64_t graph_failures = 0;   ///< captures that failed: those plans run launch by launch (logged at info)
  std::int64_t packed_parameters = 0;  ///< parameters moved into a concatenation a plan keeps (CompileOptions::pack_parameters)
  std::int64_t packed_bytes = 0;      ///< bytes of those concatenations, no longer held twice
  std::int64_t derived_computations = 0;  ///< times an inference plan computed its derived values (CompileOptions::keep_derived_values): its first run, then after each parameter change
  /// Bytes the kept derived values (CompileOptions::keep_derived_values) hold now in memory of
  /// their own, all plans of the module together, each value once: the channels-last or
  /// batch-norm-folded copies of convolution weights, transposed weights, concatenations that
  /// packing could not make views of. Memory the module holds beside the parameters as long as it
  /// lives; views of parameters (packed concatenations) count nothing.
  std::int64_t kept_bytes = 0;
  std::int64_t symbolic_plans = 0;   ///< symbolic plans fitted (each after its probe captures)
  std::int64_t instantiations = 0;   ///< new exact signatures served by a symbolic plan, no capture
  double instantiation_ms = 0;       ///< host time spent instantiating symbolic plans, all together
  std::int64_t kernels_compiled = 0; ///< kernels backends compiled for this module, all plans together
  std::int64_t value_check_failures = 0;  ///< plan runs stopped by a value check and run eagerly (in eager_calls)
  std::int64_t out_of_memory = 0;  ///< plan runs stopped because an allocation failed (eager_on_out_of_memory)
  std::size_t size = 0;          ///< plans cached now
  std::size_t capacity = 0;      ///< plan_cache_size
};

/// What happened when one signature was compiled.
struct CompileReport {
  std::string signature;                     ///< the signature, readable
  std::int64_t nodes_captured = 0;           ///< nodes in the captured graph
  std::int64_t nodes_final = 0;              ///< nodes after the passes
  std::vector<PassReport> passes;            ///< per pass, in order
  std::int64_t groups = 0;                   ///< kernels the plan launches
  std::int64_t host_nodes = 0;               ///< view nodes the host runs itself (no kernel)
  /// Graph breaks: nodes no backend claims, which run eagerly through the ATen dispatcher between
  /// the plan's kernels, each as "op: why each backend declined". The plan's other nodes run in
  /// kernels; a signature whose every node would break runs wholly eagerly instead.
  std::vector<std::string> graph_breaks;
  /// Graph breaks at data reads: each op that read a tensor computed from the call's data into
  /// C++ (`.item()`, `at::equal`), as "op of type (graph value %id), checked after step k of n".
  /// The plan holds for the value read at capture: it compares the tensor as soon as a step has
  /// computed it, and a call whose value differs runs eagerly (CacheStats::value_check_failures).
  std::vector<std::string> value_checks;
  std::map<std::string, std::int64_t> nodes_per_backend;  ///< IR nodes each backend runs
  std::int64_t kernels_compiled = 0;         ///< kernels compiled by backends for this plan
  std::int64_t kernel_cache_hits = 0;        ///< kernels a backend served from its cache
  std::int64_t groups_without_compile = 0;   ///< groups run by library or dispatcher calls: nothing compiled
  double capture_ms = 0;                     ///< tracing and import
  double passes_ms = 0;                      ///< all passes
  double backend_ms = 0;                     ///< partitioning and kernel compilation
  double total_ms = 0;                       ///< everything
  bool eager_fallback = false;               ///< the signature runs eagerly
  std::string fallback_reason;               ///< why, when it does
  std::string dump_path;                     ///< the JSON dump written, or empty
  CacheStats plan_cache;                     ///< the module's plan cache counters when this signature was captured
  std::string symbolic;                      ///< dimensions this capture made symbolic, e.g. "argument 0 dim 1", or empty
  std::string static_reason;                 ///< why dimensions asked to be symbolic were not, or empty
  double probe_ms = 0;                       ///< extra captures and plans at probe sizes (in total_ms)
  /// Training signatures (the call needs gradients): the compiled backward beside the forward.
  /// The counts above describe the forward plan.
  struct Backward {
    bool compiled = false;                   ///< the call is one autograd node with this backward
    std::int64_t nodes = 0;                  ///< nodes of the backward graph after the passes
    std::int64_t groups = 0;                 ///< kernels the backward plan launches
    std::int64_t saved_values = 0;           ///< forward values kept alive for the backward
    std::int64_t recomputed_values = 0;      ///< cheap elementwise values the backward computes again instead
    double ms = 0;                           ///< autodiff, passes and lowering of the backward (in total_ms)
  } backward;
  /// A multi-line human-readable summary.
  std::string to_string() const;
};


}  // namespace zenith
