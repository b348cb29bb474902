#include "backends/cuda/row_kernel_prelude.h"

#include "backends/cuda/reduction_codegen.h"

namespace zenith::cuda {
namespace {

constexpr const char* kRowKernelPrelude = R"(
// Block-wide reductions; blockDim.x is a multiple of 32, at most 1024.
struct ZnSum {
  static __device__ __forceinline__ float identity() { return 0.f; }
  __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};
struct ZnMax {
  static __device__ __forceinline__ float identity() { return __int_as_float(0xff800000); }
  __device__ __forceinline__ float operator()(float a, float b) const { return zn_max(a, b); }
};
struct ZnMin {
  static __device__ __forceinline__ float identity() { return __int_as_float(0x7f800000); }
  __device__ __forceinline__ float operator()(float a, float b) const { return zn_min(a, b); }
};
template <typename Op>
__device__ __forceinline__ float zn_block_reduce(float v, Op op) {
  __shared__ float partial[32];
  __shared__ float total;
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();  // every thread has read the previous reduction's total
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < (int)(blockDim.x >> 5) ? partial[lane] : Op::identity();
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
    if (lane == 0) total = v;
  }
  __syncthreads();
  return total;
}
// Four consecutive elements in one load or store of 4 * sizeof(T) bytes, converted to and from
// float32 as zn_load and zn_store convert one.
template <typename T>
__device__ __forceinline__ bool zn_vector_aligned(const T* p) {
  return reinterpret_cast<unsigned long long>(p) % (4 * sizeof(T)) == 0;
}
__device__ __forceinline__ void zn_load4(const float* p, float* v) {
  const float4 t = *reinterpret_cast<const float4*>(p);
  v[0] = t.x; v[1] = t.y; v[2] = t.z; v[3] = t.w;
}
__device__ __forceinline__ void zn_load4(const __half* p, float* v) {
  const uint2 t = *reinterpret_cast<const uint2*>(p);
  const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&t.x));
  const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&t.y));
  v[0] = a.x; v[1] = a.y; v[2] = b.x; v[3] = b.y;
}
__device__ __forceinline__ void zn_load4(const __nv_bfloat16* p, float* v) {
  const uint2 t = *reinterpret_cast<const uint2*>(p);
  const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&t.x));
  const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&t.y));
  v[0] = a.x; v[1] = a.y; v[2] = b.x; v[3] = b.y;
}
__device__ __forceinline__ void zn_load4(const bool* p, float* v) {
  const uchar4 t = *reinterpret_cast<const uchar4*>(p);
  v[0] = t.x ? 1.f : 0.f; v[1] = t.y ? 1.f : 0.f; v[2] = t.z ? 1.f : 0.f; v[3] = t.w ? 1.f : 0.f;
}
__device__ __forceinline__ void zn_store4(float* p, const float* v) {
  *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
}
__device__ __forceinline__ void zn_store4(__half* p, const float* v) {
  const __half2 a = __floats2half2_rn(v[0], v[1]), b = __floats2half2_rn(v[2], v[3]);
  *reinterpret_cast<uint2*>(p) =
      make_uint2(*reinterpret_cast<const unsigned*>(&a), *reinterpret_cast<const unsigned*>(&b));
}
__device__ __forceinline__ void zn_store4(__nv_bfloat16* p, const float* v) {
  const __nv_bfloat162 a = __floats2bfloat162_rn(v[0], v[1]), b = __floats2bfloat162_rn(v[2], v[3]);
  *reinterpret_cast<uint2*>(p) =
      make_uint2(*reinterpret_cast<const unsigned*>(&a), *reinterpret_cast<const unsigned*>(&b));
}
__device__ __forceinline__ void zn_store4(bool* p, const float* v) {
  *reinterpret_cast<uchar4*>(p) = make_uchar4(v[0] != 0.f, v[1] != 0.f, v[2] != 0.f, v[3] != 0.f);
}
)";

}  // namespace

static_assert(kRowVectorWidth == 4, "zn_load4 and zn_store4 move four elements");
static_assert(kRowElementsPerThread % kRowVectorWidth == 0, "a thread holds whole vectors");

const char* row_kernel_prelude() { return kRowKernelPrelude; }

}  // namespace zenith::cuda
