/* A working plugin that wrongly declares its kernels graph-safe: it runs single-node float32
 * `aten::relu` groups on CUDA tensors by copying them to the host and back on the launch's stream,
 * synchronizing that stream in between. Outside a capture that is merely slow; inside one, CUDA
 * refuses the synchronization. The CUDA graph tests use it to check that a failed capture leaves
 * the plan running launch by launch, correctly, as a PyTorch op that synchronizes would. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <zenith/plugin.h>

#include "stateless_plugin.h"

static const zn_host_api* g_host = NULL;

static zn_status* fail(const char* what, cudaError_t error) {
  char message[256];
  snprintf(message, sizeof message, "hostsync: %s: %s", what, cudaGetErrorString(error));
  return g_host->status_create(g_host->host_ctx, ZN_STATUS_INTERNAL, message);
}

static zn_status* hostsync_query(void* plugin_ctx, zn_query_args* args) {
  (void)plugin_ctx;
  const char* json = args->group_json;
  size_t size = args->group_json_size;
  args->supported = stateless_count(json, size, "\"op\":") == 1 &&
                    stateless_count(json, size, "\"op\":\"aten::relu\"") == 1 &&
                    stateless_count(json, size, "\"cuda") > 0 && stateless_count(json, size, "\"float32\"") > 0;
  if (!args->supported && args->reason != NULL && args->reason_capacity > 0) {
    snprintf(args->reason, args->reason_capacity, "hostsync runs single float32 CUDA relu groups only");
  }
  return NULL;
}

static zn_status* hostsync_compile(void* plugin_ctx, zn_compile_args* args) {
  (void)plugin_ctx;
  static int kernel;  /* stateless: every group is the same relu */
  args->kernel = (zn_kernel*)&kernel;
  if (ZN_HAS_FIELD(args, zn_compile_args, graph_safe)) args->graph_safe = 1; /* not true: see above */
  return NULL;
}

static zn_status* hostsync_launch(void* plugin_ctx, const zn_launch_args* args) {
  (void)plugin_ctx;
  if (args->num_inputs != 1 || args->num_outputs != 1) {
    return g_host->status_create(g_host->host_ctx, ZN_STATUS_INVALID_ARGUMENT, "hostsync: one input, one output");
  }
  const DLTensor* in = &args->inputs[0];
  const DLTensor* out = &args->outputs[0];
  size_t n = 1;
  for (int d = 0; d < in->ndim; ++d) n *= (size_t)in->shape[d];
  float* host = malloc(n * sizeof(float) + 1);
  if (host == NULL) return g_host->status_create(g_host->host_ctx, ZN_STATUS_OUT_OF_MEMORY, "hostsync: no memory");
  /* Both tensors are contiguous: the plan allocates outputs contiguous, and relu's input is a
   * matrix product's output. */
  cudaStream_t stream = (cudaStream_t)args->stream;
  cudaError_t error = cudaMemcpyAsync(host, (const char*)in->data + in->byte_offset, n * sizeof(float),
                                      cudaMemcpyDeviceToHost, stream);
  if (error == cudaSuccess) error = cudaStreamSynchronize(stream);
  if (error == cudaSuccess) {
    for (size_t i = 0; i < n; ++i) host[i] = host[i] > 0.0f ? host[i] : 0.0f;
    error = cudaMemcpyAsync((char*)out->data + out->byte_offset, host, n * sizeof(float), cudaMemcpyHostToDevice, stream);
    if (error == cudaSuccess) error = cudaStreamSynchronize(stream);  /* before `host` is freed */
  }
  free(host);
  return error == cudaSuccess ? NULL : fail("cudaMemcpy", error);
}

static const zn_plugin_api kApi = {
    sizeof(zn_plugin_api),
    ZN_ABI_MAJOR,
    ZN_ABI_MINOR,
    "hostsync",
    "0.0.1",
    "test plugin: relu through the host, not CUDA-graph safe",
    100,
    stateless_init,
    stateless_shutdown,
    hostsync_query,
    hostsync_compile,
    hostsync_launch,
    stateless_kernel_release,
};

ZN_EXPORT const zn_plugin_api* zn_plugin_get_api(const zn_host_api* host, uint16_t host_major,
                                                 uint16_t host_minor) {
  (void)host_minor;
  if (host == NULL || host_major != ZN_ABI_MAJOR || !ZN_CAN_CALL(host, zn_host_api, status_create)) return NULL;
  g_host = host;
  return &kApi;
}
