// The JIT CUDA backend plugin: claims fused groups on CUDA tensors. Elementwise chains, and row
// reductions and normalizations with their elementwise neighbours, become one generated CUDA C++
// kernel per group (kernel_codegen), as do a decode step's attention and a max pool; matrix
// products with their bias and activation epilogue become one cuBLASLt call (cublaslt_matmul), or,
// with one row in linear's form, one generated matrix-vector kernel that streams the weight
// (matrix_vector; ZENITH_MATRIX_VECTOR=0 turns it off, to measure cuBLASLt alone). In the host's
// CUDA graph of a plan, generated kernels are launched to be dispatched while the kernel before
// them ends (programmatic_launch.h). A generated kernel is found in the kernel cache or compiles
// it with NVRTC for this device, and launches it on the host's stream. Priority 300: above the
// PyTorch GPU plugin, which runs whatever this one declines.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "backends/cuda/cublaslt_matmul.h"
#include "backends/cuda/cuda_architecture.h"
#include "backends/cuda/kernel_codegen.h"
#include "backends/cuda/kernel_cache.h"
#include "backends/cuda/matrix_vector.h"
#include "backends/cuda/nvrtc_compiler.h"
#include "backends/cuda/operand_checks.h"
#include "backends/cuda/programmatic_launch.h"
#include "core/graph_json.h"
#include "core/op_registry.h"
#include "core/plugin_guard.h"
#include "zenith/plugin.h"

namespace {

using zenith::cuda::GeneratedKernel;
using zenith::cuda::MatmulProgram;

const zn_host_api* host = nullptr;

// A loaded kernel, shared by every group with the same key.
struct LoadedKernel {
  cudaLibrary_t library = nullptr;
  cudaKernel_t function = nullptr;
};

struct FusedKernel {
  GeneratedKernel kernel;
  std::shared_ptr<LoadedKernel> loaded;
};

// A matrix product: its cuBLASLt program, and the matrix-vector kernel for launches with few rows
// (null when the form has none or the kernel is turned off).
struct MatrixProduct {
  MatmulProgram program;
  std::shared_ptr<LoadedKernel> matrix_vector;
  // The sizes its launches have met, for cuBLASLt's choice where they vary (a symbolic plan shares
  // this kernel between its sizes).
  std::unique_ptr<zenith::cuda::MatmulHistory> history = std::make_unique<zenith::cuda::MatmulHistory>();
};

// What compile hands the host: a generated kernel, or a matrix product.
using JitKernel = std::variant<FusedKernel, MatrixProduct>;

// A planned product: its cuBLASLt program, and whether a launch of its group may fit the
// matrix-vector kernel (decided on the group's types, when query plans it).
struct PlannedProduct {
  MatmulProgram program;
  bool matrix_vector = false;
};

using Planned = std::variant<GeneratedKernel, PlannedProduct>;

// Accepted plans kept between query and compile; more would mean compiles that never came.
constexpr std::size_t kMaxAccepted = 1024;

struct Context {
  zenith::cuda::CompileTarget target;
  int multiprocessors = 1;
  std::unique_ptr<zenith::cuda::KernelCache> cache;
  std::mutex mutex;  // guards loaded, compiling and accepted
  std::map<std::string, std::shared_ptr<LoadedKernel>> loaded;  // by full key
  std::map<std::string, std::shared_ptr<std::mutex>> compiling;  // by full key: one compile at a time
  // What query planned for a group it accepted, by group JSON, for the compile that follows: the
  // host asks query first, so compile finds its group parsed and its kernel generated.
  std::map<std::string, Planned> accepted;
  std::unique_ptr<zenith::cuda::CublasLtMatmul> blas;  // null when cuBLASLt could not start
  std::string blas_failure;
  bool matrix_vector = true;  // ZENITH_MATRIX_VECTOR=0 sends every product to cuBLASLt
  bool programmatic_launch = false;  // the matrix-vector kernel launched early in graphs (sm_90 on)
};

zn_status* fail(zn_status_code code, const std::string& message) {
  return zenith::plugin_side::make_status(host, code, message);
}

template <typename Body>
zn_status* guarded(Body&& body) noexcept {
  return zenith::plugin_side::guarded(host, std::forward<Body>(body));
}

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw std::runtime_error(fmt::format("{}: {}", what, cudaGetErrorString(status)));
}

// Groups holding a matrix product go to cuBLASLt, the others to the code generators.
std::variant<Planned, std::string> plan(const char* json, size_t size) {
  auto group = zenith::ir::from_json(zenith::ir::parse_json(std::string(json, size), "group from the host"));
  const bool product = std::any_of(group.nodes.begin(), group.nodes.end(), [](const zenith::ir::Node& node) {
    return zenith::ir::op_info(node.op).category == zenith::ir::OpCategory::MatrixProduct;
  });
  if (product) {
    auto planned = zenith::cuda::plan_matmul(group);
    if (auto* why = std::get_if<std::string>(&planned)) return std::move(*why);
    auto& program = std::get<MatmulProgram>(planned);
    const bool matrix_vector = zenith::cuda::matrix_vector_may_serve(program, group);
    return Planned{PlannedProduct{std::move(program), matrix_vector}};
  }
  auto generated = zenith::cuda::generate_kernel(group);
  if (auto* why = std::get_if<std::string>(&generated)) return std::move(*why);
  return Planned{std::get<GeneratedKernel>(std::move(generated))};
}

// What changes the binary besides the source's key: the target, the compiler and its options.
std::string full_key(const Context& context, const std::string& source_key) {
  std::string options;
  for (const auto& option : zenith::cuda::standard_options(context.target)) {
    if (option.rfind("-I", 0) != 0) options += option + " ";  // include folders differ between machines
  }
  return fmt::format("{} | target {} | nvrtc {} | {}", source_key, context.target.to_string(),
                     zenith::cuda::nvrtc_version(), options);
}

std::shared_ptr<LoadedKernel> load(const zenith::cuda::CachedKernel& binary) {
  auto loaded = std::make_shared<LoadedKernel>();
  check(cudaLibraryLoadData(&loaded->library, binary.binary.data(), nullptr, nullptr, 0, nullptr, nullptr, 0),
        "loading the compiled kernel");
  check(cudaLibraryGetKernel(&loaded->function, loaded->library, binary.kernel_name.c_str()), "finding the kernel");
  return loaded;
}

zn_status* jit_init(const char*, void** context_out) {
  return guarded([&]() -> zn_status* {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
      cudaGetLastError();
      return fail(ZN_STATUS_UNAVAILABLE, "no CUDA device");
    }
    int device = 0, major = 0, minor = 0, sms = 0;
    check(cudaGetDevice(&device), "cudaGetDevice");
    check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), "compute capability");
    check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device), "compute capability");
    check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "multiprocessor count");
    auto context = std::make_unique<Context>();
    context->target = zenith::cuda::choose_target({major, minor}, zenith::cuda::nvrtc_supported_architectures());
    context->multiprocessors = sms;
    const char* matrix_vector = std::getenv("ZENITH_MATRIX_VECTOR");
    context->matrix_vector = matrix_vector == nullptr || std::strcmp(matrix_vector, "0") != 0;
    context->programmatic_launch = zenith::cuda::programmatic_launch_enabled(major);
    context->cache = std::make_unique<zenith::cuda::KernelCache>(zenith::cuda::KernelCache::default_folder());
    // Without cuBLASLt the generated kernels still work; matrix products then go to the next backend.
    try {
      context->blas = std::make_unique<zenith::cuda::CublasLtMatmul>();
    } catch (const std::exception& error) {
      context->blas_failure = error.what();
      host->log(host->host_ctx, ZN_LOG_WARN, "jit_cuda",
                fmt::format("cuBLASLt is unavailable, matrix products go to the next backend: {}", error.what()).c_str());
    }
    *context_out = context.release();
    return nullptr;
  });
}

void jit_shutdown(void* context) { delete static_cast<Context*>(context); }

// Why this plugin cannot run the group, or empty.
std::string refusal(const Context& context, const std::variant<Planned, std::string>& planned) {
  if (const auto* why = std::get_if<std::string>(&planned)) return *why;
  if (std::holds_alternative<PlannedProduct>(std::get<Planned>(planned)) && !context.blas) {
    return "cuBLASLt is unavailable: " + context.blas_failure;
  }
  return "";
}

zn_status* jit_query(void* context_ptr, zn_query_args* args) {
  return guarded([&]() -> zn_status* {
    if (!ZN_HAS_FIELD(args, zn_query_args, reason_capacity)) return fail(ZN_STATUS_INVALID_ARGUMENT, "zn_query_args too short");
    auto& context = *static_cast<Context*>(context_ptr);
    auto planned = plan(args->group_json, args->group_json_size);
    auto why = refusal(context, planned);
    if (why.empty()) {
      std::lock_guard<std::mutex> lock(context.mutex);
      // Bounded: a host may query groups it never compiles (another backend ranked first).
      if (context.accepted.size() >= kMaxAccepted) context.accepted.clear();
      context.accepted.insert_or_assign(std::string(args->group_json, args->group_json_size),
                                        std::get<Planned>(std::move(planned)));
    }
    zenith::plugin_side::answer_query(args, why);
    return nullptr;
  });
}

// The plan query made for this group, taken out of the context, or a fresh one.
std::variant<Planned, std::string> accepted_plan(Context& context, const char* json, size_t size) {
  {
    std::lock_guard<std::mutex> lock(context.mutex);
    auto it = context.accepted.find(std::string(json, size));
    if (it != context.accepted.end()) {
      Planned planned = std::move(it->second);
      context.accepted.erase(it);
      return planned;
    }
  }
  return plan(json, size);
}

// A plan's kernels compile in parallel and often share keys (identical layers): a second compile
// of one key waits for the first and then finds its result in the cache, rather than running
// NVRTC again.
std::shared_ptr<std::mutex> compile_lock(Context& context, const std::string& key) {
  std::lock_guard<std::mutex> lock(context.mutex);
  auto& slot = context.compiling[key];
  if (!slot) slot = std::make_shared<std::mutex>();
  return slot;
}

// What a kernel is built from: the text its cache entry is keyed by, its extern "C" name and its
// whole source.
struct KernelSource {
  std::string key;
  std::string name;
  std::string source;
};

// The kernel, from the cache or compiled by NVRTC now, loaded once per process.
std::shared_ptr<LoadedKernel> build(Context& context, const KernelSource& kernel, const char* options_json,
                                    bool& from_cache) {
  zenith::cuda::KernelKey key{full_key(context, kernel.key)};
  auto key_mutex = compile_lock(context, key.text);
  std::lock_guard<std::mutex> compiling(*key_mutex);
  from_cache = true;
  auto cached = context.cache->find(key);
  if (!cached) {
    from_cache = false;
    auto options = nlohmann::json::parse(options_json ? options_json : "{}", nullptr, false);
    zenith::cuda::CompileRequest request;
    request.source = kernel.source;
    request.kernel_name = kernel.name;
    request.target = context.target;
    request.source_file_name = kernel.name + ".cu";
    request.dump_folder = options.is_object() ? options.value("dump_dir", "") : "";
    auto compiled = zenith::cuda::compile(request);
    cached = zenith::cuda::CachedKernel{kernel.name, std::move(compiled.binary), compiled.kind};
    context.cache->store(key, *cached);
  }
  std::lock_guard<std::mutex> lock(context.mutex);
  auto& slot = context.loaded[key.text];
  if (!slot) slot = load(*cached);
  return slot;
}

FusedKernel build_fused(Context& context, GeneratedKernel kernel, const char* options_json, bool& from_cache) {
  auto loaded = build(context, {kernel.key(), kernel.name(), kernel.source()}, options_json, from_cache);
  return FusedKernel{std::move(kernel), std::move(loaded)};
}

// The product's program, with the matrix-vector kernel where a launch of the group may use it. The
// kernel's source is its own key: it changes whenever anything the kernel does changes.
MatrixProduct build_product(Context& context, PlannedProduct planned, const char* options_json, bool& from_cache) {
  MatrixProduct product{std::move(planned.program), nullptr};
  if (context.matrix_vector && planned.matrix_vector) {
    auto source = zenith::cuda::matrix_vector_source(product.program);
    product.matrix_vector =
        build(context, {source, zenith::cuda::matrix_vector_name(product.program), source}, options_json, from_cache);
  }
  return product;
}

zn_status* jit_compile(void* context_ptr, zn_compile_args* args) {
  return guarded([&]() -> zn_status* {
    if (!ZN_HAS_FIELD(args, zn_compile_args, kernel)) return fail(ZN_STATUS_INVALID_ARGUMENT, "zn_compile_args too short");
    auto& context = *static_cast<Context*>(context_ptr);
    auto planned = accepted_plan(context, args->group_json, args->group_json_size);
    if (auto why = refusal(context, planned); !why.empty()) return fail(ZN_STATUS_UNSUPPORTED, why);
    std::unique_ptr<JitKernel> jit;
    zn_compile_source source = ZN_COMPILE_NOTHING;  // a cuBLASLt call compiles nothing
    // Generated kernels and cuBLASLt calls read sizes and strides at every launch; only 32-bit
    // offsets bound what a kernel serves.
    std::int64_t max_extent = 0;
    if (auto* generated = std::get_if<GeneratedKernel>(&std::get<Planned>(planned))) {
      if (!generated->index64()) max_extent = zenith::cuda::kMax32BitExtent;
      bool from_cache = false;
      jit = std::make_unique<JitKernel>(build_fused(context, std::move(*generated), args->options_json, from_cache));
      source = from_cache ? ZN_COMPILE_FROM_CACHE : ZN_COMPILE_COMPILED;
    } else {
      bool from_cache = true;
      auto product =
          build_product(context, std::get<PlannedProduct>(std::move(std::get<Planned>(planned))), args->options_json,
                        from_cache);
      if (product.matrix_vector) source = from_cache ? ZN_COMPILE_FROM_CACHE : ZN_COMPILE_COMPILED;
      jit = std::make_unique<JitKernel>(std::move(product));
    }
    if (ZN_HAS_FIELD(args, zn_compile_args, from_cache)) args->from_cache = source;
    if (ZN_HAS_FIELD(args, zn_compile_args, max_extent)) {
      args->shape_generic = 1;
      args->max_extent = max_extent;
    }
    // Generated kernels and cuBLASLt enqueue on the launch's stream, workspace from host->alloc.
    if (ZN_HAS_FIELD(args, zn_compile_args, graph_safe)) args->graph_safe = 1;
    // The generated function's name is the dumped source's file name; a product is named after its
    // cuBLASLt program. Both live in the kernel, past compile's return.
    if (ZN_HAS_FIELD(args, zn_compile_args, kernel_name)) {
      const auto* fused = std::get_if<FusedKernel>(jit.get());
      args->kernel_name = fused != nullptr ? fused->kernel.name().c_str() : std::get<MatrixProduct>(*jit).program.name.c_str();
    }
    args->kernel = reinterpret_cast<zn_kernel*>(jit.release());
    return nullptr;
  });
}

// Whether the host records this launch into its own plan's CUDA graph (it passes inputs_unwritten
// only then), where the generated kernels are programmatic dependent launches.
bool in_host_graph(const zn_launch_args& args) {
  return ZN_HAS_FIELD(&args, zn_launch_args, inputs_unwritten) && args.inputs_unwritten != nullptr;
}

// In the host's graph, a kernel that waits for the kernel before it as its first statement is
// dispatched while that one runs (programmatic_launch.h).
void launch_fused(const Context& context, const FusedKernel& fused, const std::vector<const DLTensor*>& operands,
                  const zn_launch_args& args) {
  auto config = zenith::cuda::launch_config(fused.kernel, operands, context.multiprocessors);
  if (config.blocks == 0) return;
  void* params[] = {config.words.data()};
  const bool early = context.programmatic_launch && in_host_graph(args) && fused.kernel.follows_kernel_before();
  check(zenith::cuda::launch_generated_kernel(reinterpret_cast<const void*>(fused.loaded->function),
                                              dim3(static_cast<unsigned>(config.blocks)),
                                              dim3(static_cast<unsigned>(config.threads)), params,
                                              static_cast<cudaStream_t>(args.stream), early),
        "launching the generated kernel");
}

// The matrix-vector kernel when the launch fits it, else cuBLASLt with workspace from PyTorch's
// caching allocator through the host, ordered on the launch's stream.
void launch_product(const Context& context, const MatrixProduct& product, const zn_launch_args& args) {
  const auto& program = product.program;
  std::vector<const DLTensor*> inputs, outputs;
  for (size_t i = 0; i < args.num_inputs; ++i) inputs.push_back(&args.inputs[i]);
  for (size_t o = 0; o < args.num_outputs; ++o) outputs.push_back(&args.outputs[o]);
  if (product.matrix_vector) {
    if (auto fit = zenith::cuda::matrix_vector_fit(program, inputs, outputs)) {
      const auto stream = static_cast<cudaStream_t>(args.stream);
      // Early only where the host records its own plan's graph and nothing recorded there writes
      // the weight (zn_launch_args.inputs_unwritten; programmatic_launch.h).
      const bool early = context.programmatic_launch && in_host_graph(args) && args.inputs_unwritten[program.b_input] == 1;
      zenith::cuda::launch_matrix_vector(reinterpret_cast<const void*>(product.matrix_vector->function), *fit,
                                         context.multiprocessors, stream, early);
      return;
    }
  }
  const DLDevice device = args.outputs[0].device;
  auto allocate = [&](std::size_t bytes) { return host->alloc(host->host_ctx, device, bytes, args.stream); };
  auto release = [&](void* ptr) { host->dealloc(host->host_ctx, device, ptr); };
  context.blas->run(program, inputs, outputs, static_cast<cudaStream_t>(args.stream), allocate, release,
                    product.history.get());
}

zn_status* jit_launch(void* context_ptr, const zn_launch_args* args) {
  return guarded([&]() -> zn_status* {
    if (!ZN_HAS_FIELD(args, zn_launch_args, stream)) return fail(ZN_STATUS_INVALID_ARGUMENT, "zn_launch_args too short");
    const auto& context = *static_cast<Context*>(context_ptr);
    const auto* jit = reinterpret_cast<const JitKernel*>(args->kernel);
    if (jit == nullptr) return fail(ZN_STATUS_INVALID_ARGUMENT, "no kernel");
    if (const auto* product = std::get_if<MatrixProduct>(jit)) {
      const auto& program = product->program;
      if (args->num_inputs != static_cast<size_t>(program.input_count) || args->num_outputs != 1) {
        return fail(ZN_STATUS_INVALID_ARGUMENT, fmt::format("the matrix product takes {} inputs and 1 output, the launch "
                                                            "passed {} and {}", program.input_count, args->num_inputs,
                                                            args->num_outputs));
      }
      launch_product(context, *product, *args);
      return nullptr;
    }
    const auto& fused = std::get<FusedKernel>(*jit);
    if (args->num_inputs + args->num_outputs != fused.kernel.operands().size()) {
      return fail(ZN_STATUS_INVALID_ARGUMENT, fmt::format("the kernel takes {} tensors, the launch passed {}",
                                                          fused.kernel.operands().size(), args->num_inputs + args->num_outputs));
    }
    std::vector<const DLTensor*> operands;
    for (size_t i = 0; i < args->num_inputs; ++i) operands.push_back(&args->inputs[i]);
    for (size_t o = 0; o < args->num_outputs; ++o) operands.push_back(&args->outputs[o]);
    launch_fused(context, fused, operands, *args);
    return nullptr;
  });
}

void jit_kernel_release(void*, zn_kernel* kernel) { delete reinterpret_cast<JitKernel*>(kernel); }

const zn_plugin_api kApi = {
    sizeof(zn_plugin_api), ZN_ABI_MAJOR, ZN_ABI_MINOR, "jit_cuda", "0.1.0", "NVRTC-generated fused kernels and cuBLASLt matrix products", 300,
    jit_init, jit_shutdown, jit_query, jit_compile, jit_launch, jit_kernel_release,
};

}  // namespace

extern "C" ZN_EXPORT const zn_plugin_api* zn_plugin_get_api(const zn_host_api* host_api, uint16_t major, uint16_t) {
  if (host_api == nullptr || major != ZN_ABI_MAJOR) return nullptr;
  host = host_api;
  return &kApi;
}
