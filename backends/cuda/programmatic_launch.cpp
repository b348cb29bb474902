#include "backends/cuda/programmatic_launch.h"

#include <cstdlib>
#include <cstring>

namespace zenith::cuda {

bool programmatic_launch_enabled(int major) {
  const char* setting = std::getenv("ZENITH_PROGRAMMATIC_LAUNCH");
  return major >= 9 && (setting == nullptr || std::strcmp(setting, "0") != 0);
}

cudaError_t launch_generated_kernel(const void* function, dim3 grid, dim3 block, void** params, cudaStream_t stream,
                                    bool programmatic) {
  if (!programmatic) return cudaLaunchKernel(function, grid, block, params, 0, stream);
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = 0;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = 1;
  return cudaLaunchKernelExC(&config, function, params);
}

}  // namespace zenith::cuda
