// The PyTorch GPU plugin: runs any ATen op on CUDA tensors through the dispatcher (PyTorch's own
// CUDA kernels), on the stream the host passes. Priority between the JIT CUDA backend and the CPU.
// Without a CUDA device it reports itself unavailable and the host skips it with one log line.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "backends/dispatcher/dispatcher_plugin.h"
#ifdef ZENITH_HAVE_CUDNN
#include "plugins/torch_gpu/cudnn_scaled_convolution.h"
#endif

namespace {

std::string availability() {
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error so that later CUDA users start clean
    return fmt::format("no usable CUDA device ({})", cudaGetErrorString(status));
  }
  if (count == 0) return "no CUDA device";
  return "";
}

void run_on_stream(void* stream, int device_index, const std::function<void()>& body) {
  c10::cuda::CUDAGuard device(static_cast<c10::DeviceIndex>(device_index));
  auto external = c10::cuda::getStreamFromExternal(static_cast<cudaStream_t>(stream),
                                                   static_cast<c10::DeviceIndex>(device_index));
  c10::cuda::CUDAStreamGuard on_stream(external);
  body();
}

#ifdef ZENITH_HAVE_CUDNN
// zenith::convolution_scale_relu runs as one cuDNN graph while this plugin is loaded; unloading it
// hands the op back to its written form before the plugin's code goes.
struct ScaledConvolutionInstallation {
  ScaledConvolutionInstallation() { zenith::torch_gpu::install_cudnn_scaled_convolution(); }
  ~ScaledConvolutionInstallation() { zenith::torch_gpu::remove_cudnn_scaled_convolution(); }
  ScaledConvolutionInstallation(const ScaledConvolutionInstallation&) = delete;
  ScaledConvolutionInstallation& operator=(const ScaledConvolutionInstallation&) = delete;
};
const ScaledConvolutionInstallation scaled_convolution_installation;
#endif

const zenith::dispatcher_plugin::Settings kSettings = {
    /*name=*/"torch_gpu",
    /*version=*/"0.1.0",
    /*build_id=*/"torch " ZENITH_TORCH_VERSION,
    /*priority=*/200,
    /*device_type=*/c10::DeviceType::CUDA,
    /*availability=*/&availability,
    /*run_on_stream=*/&run_on_stream,
};

}  // namespace

extern "C" ZN_EXPORT const zn_plugin_api* zn_plugin_get_api(const zn_host_api* host, uint16_t major, uint16_t) {
  return zenith::dispatcher_plugin::make_api(kSettings, host, major);
}
