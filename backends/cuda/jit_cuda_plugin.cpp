// The JIT CUDA backend plugin: claims fused groups on CUDA tensors (elementwise chains, and row
// reductions and normalizations with their elementwise neighbours), generates one CUDA C++ kernel
// per group (kernel_codegen), finds it in the kernel cache or compiles it
// with NVRTC for this device, and launches it on the host's stream. Priority 300: above the
// PyTorch GPU plugin, which runs whatever this one declines.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "backends/cuda/cuda_architecture.h"
#include "backends/cuda/kernel_codegen.h"
#include "backends/cuda/kernel_cache.h"
#include "backends/cuda/nvrtc_compiler.h"
#include "core/graph_json.h"
#include "core/plugin_guard.h"
#include "zenith/plugin.h"

namespace {

using zenith::cuda::GeneratedKernel;

const zn_host_api* host = nullptr;

// A loaded kernel, shared by every group with the same key.
struct LoadedKernel {
  cudaLibrary_t library = nullptr;
  cudaKernel_t function = nullptr;
};

struct JitKernel {
  GeneratedKernel kernel;
  std::shared_ptr<LoadedKernel> loaded;
};

struct Context {
  zenith::cuda::CompileTarget target;
  int multiprocessors = 1;
  std::unique_ptr<zenith::cuda::KernelCache> cache;
  std::mutex mutex;
  std::map<std::string, std::shared_ptr<LoadedKernel>> loaded;  // by full key
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

std::variant<GeneratedKernel, std::string> generate(const char* json, size_t size) {
  auto group = zenith::ir::from_json(zenith::ir::parse_json(std::string(json, size), "group from the host"));
  return zenith::cuda::generate_kernel(group);
}

// What changes the binary besides the source's key: the target, the compiler and its options.
std::string full_key(const Context& context, const GeneratedKernel& kernel) {
  std::string options;
  for (const auto& option : zenith::cuda::standard_options(context.target)) {
    if (option.rfind("-I", 0) != 0) options += option + " ";  // include folders differ between machines
  }
  return fmt::format("{} | target {} | nvrtc {} | {}", kernel.key(), context.target.to_string(),
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
    context->cache = std::make_unique<zenith::cuda::KernelCache>(zenith::cuda::KernelCache::default_folder());
    *context_out = context.release();
    return nullptr;
  });
}

void jit_shutdown(void* context) { delete static_cast<Context*>(context); }

zn_status* jit_query(void*, zn_query_args* args) {
  return guarded([&]() -> zn_status* {
    if (!ZN_HAS_FIELD(args, zn_query_args, reason_capacity)) return fail(ZN_STATUS_INVALID_ARGUMENT, "zn_query_args too short");
    auto generated = generate(args->group_json, args->group_json_size);
    const auto* why = std::get_if<std::string>(&generated);
    zenith::plugin_side::answer_query(args, why ? *why : std::string());
    return nullptr;
  });
}

zn_status* jit_compile(void* context_ptr, zn_compile_args* args) {
  return guarded([&]() -> zn_status* {
    if (!ZN_HAS_FIELD(args, zn_compile_args, kernel)) return fail(ZN_STATUS_INVALID_ARGUMENT, "zn_compile_args too short");
    auto& context = *static_cast<Context*>(context_ptr);
    auto generated = generate(args->group_json, args->group_json_size);
    if (const auto* why = std::get_if<std::string>(&generated)) return fail(ZN_STATUS_UNSUPPORTED, *why);
    auto jit = std::make_unique<JitKernel>();
    jit->kernel = std::get<GeneratedKernel>(std::move(generated));
    zenith::cuda::KernelKey key{full_key(context, jit->kernel)};
    bool from_cache = true;
    auto cached = context.cache->find(key);
    if (!cached) {
      from_cache = false;
      auto options = nlohmann::json::parse(args->options_json ? args->options_json : "{}", nullptr, false);
      zenith::cuda::CompileRequest request;
      request.source = jit->kernel.source();
      request.kernel_name = jit->kernel.name();
      request.target = context.target;
      request.source_file_name = jit->kernel.name() + ".cu";
      request.dump_folder = options.is_object() ? options.value("dump_dir", "") : "";
      auto compiled = zenith::cuda::compile(request);
      cached = zenith::cuda::CachedKernel{jit->kernel.name(), std::move(compiled.binary), compiled.kind};
      context.cache->store(key, *cached);
    }
    {
      std::lock_guard<std::mutex> lock(context.mutex);
      auto& slot = context.loaded[key.text];
      if (!slot) slot = load(*cached);
      jit->loaded = slot;
    }
    if (ZN_HAS_FIELD(args, zn_compile_args, from_cache)) args->from_cache = from_cache ? 1 : 0;
    args->kernel = reinterpret_cast<zn_kernel*>(jit.release());
    return nullptr;
  });
}

zn_status* jit_launch(void* context_ptr, const zn_launch_args* args) {
  return guarded([&]() -> zn_status* {
    if (!ZN_HAS_FIELD(args, zn_launch_args, stream)) return fail(ZN_STATUS_INVALID_ARGUMENT, "zn_launch_args too short");
    const auto& context = *static_cast<Context*>(context_ptr);
    const auto* jit = reinterpret_cast<const JitKernel*>(args->kernel);
    if (jit == nullptr) return fail(ZN_STATUS_INVALID_ARGUMENT, "no kernel");
    if (args->num_inputs + args->num_outputs != jit->kernel.operands().size()) {
      return fail(ZN_STATUS_INVALID_ARGUMENT, fmt::format("the kernel takes {} tensors, the launch passed {}",
                                                          jit->kernel.operands().size(), args->num_inputs + args->num_outputs));
    }
    std::vector<const DLTensor*> operands;
    for (size_t i = 0; i < args->num_inputs; ++i) operands.push_back(&args->inputs[i]);
    for (size_t o = 0; o < args->num_outputs; ++o) operands.push_back(&args->outputs[o]);
    auto config = zenith::cuda::launch_config(jit->kernel, operands, context.multiprocessors);
    if (config.blocks == 0) return nullptr;
    void* params[] = {config.words.data()};
    check(cudaLaunchKernel(reinterpret_cast<const void*>(jit->loaded->function), dim3(static_cast<unsigned>(config.blocks)),
                           dim3(static_cast<unsigned>(config.threads)), params, 0, static_cast<cudaStream_t>(args->stream)),
          "launching the generated kernel");
    return nullptr;
  });
}

void jit_kernel_release(void*, zn_kernel* kernel) { delete reinterpret_cast<JitKernel*>(kernel); }

const zn_plugin_api kApi = {
    sizeof(zn_plugin_api), ZN_ABI_MAJOR, ZN_ABI_MINOR, "jit_cuda", "0.1.0", "NVRTC code generator: elementwise and row-reduction kernels", 300,
    jit_init, jit_shutdown, jit_query, jit_compile, jit_launch, jit_kernel_release,
};

}  // namespace

extern "C" ZN_EXPORT const zn_plugin_api* zn_plugin_get_api(const zn_host_api* host_api, uint16_t major, uint16_t) {
  if (host_api == nullptr || major != ZN_ABI_MAJOR) return nullptr;
  host = host_api;
  return &kApi;
}
