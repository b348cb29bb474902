// Matrix-vector kernel variants for a batch-1 decode step (float16), against cuBLAS, measured as a
// decode step runs them: one launch per copy of the weight, copies enough to fill 600 MB (several
// times L2), captured in one CUDA graph, so that each launch reads a cold weight right after the
// launch before it. Prints a table: microseconds a launch (median of 7 timings of 5 replays), GB/s,
// and each variant's largest difference from cuBLAS relative to cuBLAS's largest output.
//
// Not part of the build (it needs nvcc, which the project does not): on a GPU machine,
//   nvcc -O3 -arch=sm_90 -std=c++17 -o /tmp/matrix_vector_variants bench/matrix_vector_variants.cu -lcublas
//   /tmp/matrix_vector_variants
// The figures it gave are in docs/performance.md (2026-11-28, 12:51 and 12:52 UTC); the kernel the
// JIT CUDA plugin generates (backends/cuda/matrix_vector.cpp) is its "b4 rpw1" variant: one warp a
// weight row (two warps for 2048 rows), four 16-byte loads a batch.
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#define CHECK(x)                                                                          \
  do {                                                                                    \
    cudaError_t e = (x);                                                                  \
    if (e != cudaSuccess) {                                                               \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e), __FILE__, __LINE__); \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)
#define CHECK_BLAS(x)                                                \
  do {                                                               \
    cublasStatus_t s = (x);                                          \
    if (s != CUBLAS_STATUS_SUCCESS) {                                \
      std::printf("cuBLAS error %d at line %d\n", (int)s, __LINE__); \
      std::exit(1);                                                  \
    }                                                                \
  } while (0)

__device__ __forceinline__ float dot8(uint4 w, uint4 a) {
  const __half2* wh = reinterpret_cast<const __half2*>(&w);
  const __half2* ah = reinterpret_cast<const __half2*>(&a);
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 wf = __half22float2(wh[i]), af = __half22float2(ah[i]);
    s = fmaf(wf.x, af.x, s);
    s = fmaf(wf.y, af.y, s);
  }
  return s;
}

template <int LK>
__device__ __forceinline__ uint4 load_w(const uint4* p) {
  if constexpr (LK == 0) {
    return __ldg(p);
  } else if constexpr (LK == 1) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
  } else {
    uint4 v;
    unsigned long long policy;
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
    asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p), "l"(policy));
    return v;
  }
}

// y[n] = sum_k W[n, k] x[k]. W row-major [N, K]; C = K / 8 16-byte chunks a row. A warp takes RPW
// rows (or a WPR-th of one row's chunks); lane l reads chunks part*32 + l + j*32*WPR, BATCH of them
// (for each of its rows) issued before any is used.
template <int BATCH, int RPW, int WPR, int LK>
__global__ void gemv(const uint4* __restrict__ W, const uint4* __restrict__ x, __half* __restrict__ y, int N, int C) {
  __shared__ float partial[32][RPW];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int wpb = blockDim.x >> 5;
  const int gw = blockIdx.x * wpb + warp;
  const int group = gw / WPR, part = gw % WPR;
  const int row0 = group * RPW;
  float acc[RPW];
  const uint4* wrow[RPW];
#pragma unroll
  for (int r = 0; r < RPW; ++r) {
    acc[r] = 0.f;
    wrow[r] = W + (size_t)min(row0 + r, N - 1) * C;
  }
  const int stride = 32 * WPR;
  int c = part * 32 + lane;
  if (row0 < N) {
    for (; c + (BATCH - 1) * stride < C; c += BATCH * stride) {
      uint4 wv[RPW][BATCH];
#pragma unroll
      for (int j = 0; j < BATCH; ++j)
#pragma unroll
        for (int r = 0; r < RPW; ++r) wv[r][j] = load_w<LK>(wrow[r] + c + j * stride);
      uint4 xv[BATCH];
#pragma unroll
      for (int j = 0; j < BATCH; ++j) xv[j] = __ldg(x + c + j * stride);
#pragma unroll
      for (int j = 0; j < BATCH; ++j)
#pragma unroll
        for (int r = 0; r < RPW; ++r) acc[r] += dot8(wv[r][j], xv[j]);
    }
    if (c < C) {  // a guarded last batch: its loads still go out together
      uint4 wv[RPW][BATCH];
      uint4 xv[BATCH];
#pragma unroll
      for (int j = 0; j < BATCH; ++j) {
        const bool in = c + j * stride < C;
        const int cc = in ? c + j * stride : c;
#pragma unroll
        for (int r = 0; r < RPW; ++r) wv[r][j] = load_w<LK>(wrow[r] + cc);
        xv[j] = in ? __ldg(x + cc) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int j = 0; j < BATCH; ++j)
#pragma unroll
        for (int r = 0; r < RPW; ++r) acc[r] += dot8(wv[r][j], xv[j]);
    }
  }
#pragma unroll
  for (int r = 0; r < RPW; ++r)
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], o);
  if constexpr (WPR > 1) {
    if (lane == 0)
#pragma unroll
      for (int r = 0; r < RPW; ++r) partial[warp][r] = acc[r];
    __syncthreads();
    if (part != 0) return;
#pragma unroll
    for (int r = 0; r < RPW; ++r) {
      float s = 0.f;
#pragma unroll
      for (int j = 0; j < WPR; ++j) s += partial[warp + j][r];
      acc[r] = s;
    }
  }
  if (lane < RPW) {
    float v = acc[0];
#pragma unroll
    for (int r = 1; r < RPW; ++r)
      if (lane == r) v = acc[r];
    if (row0 + lane < N) y[row0 + lane] = __float2half_rn(v);
  }
}


__device__ __forceinline__ unsigned smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

// The block's ROWS weight rows (contiguous: ROWS * C chunks) copied into shared memory by one bulk
// (TMA) copy, so that every byte of them is in flight at once; then each warp reduces rows from
// shared memory. x is read through L1.
template <int ROWS>
__global__ void gemv_bulk(const uint4* __restrict__ W, const uint4* __restrict__ x, __half* __restrict__ y, int N, int C) {
  extern __shared__ __align__(128) uint4 rows[];
  __shared__ __align__(8) unsigned long long bar;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  const int row0 = blockIdx.x * ROWS;
  const int nrows = min(ROWS, N - row0);
  const unsigned b = smem_addr(&bar);
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(b));
    asm volatile("fence.mbarrier_init.release.cluster;");
    asm volatile("fence.proxy.async.shared::cta;");
    const unsigned bytes = (unsigned)nrows * C * 16;
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(b), "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     smem_addr(rows)),
                 "l"(W + (size_t)row0 * C), "r"(bytes), "r"(b)
                 : "memory");
  }
  __syncthreads();
  unsigned done = 0;
  while (!done) {
    asm volatile(
        "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0; selp.u32 %0, 1, 0, p; }"
        : "=r"(done)
        : "r"(b)
        : "memory");
  }
  for (int r = warp; r < nrows; r += warps) {
    const uint4* row = rows + (size_t)r * C;
    float acc = 0.f;
#pragma unroll 4
    for (int c = lane; c < C; c += 32) acc += dot8(row[c], __ldg(x + c));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) y[row0 + r] = __float2half_rn(acc);
  }
}

// Each warp copies its RPW rows into its own part of shared memory with 16-byte asynchronous
// copies (no register waits on them, so all go out back to back), waits, and reduces them.
template <int RPW>
__global__ void gemv_async(const uint4* __restrict__ W, const uint4* __restrict__ x, __half* __restrict__ y, int N, int C) {
  extern __shared__ __align__(128) uint4 stage[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  const int row0 = (blockIdx.x * warps + warp) * RPW;
  if (row0 >= N) return;
  const int nrows = min(RPW, N - row0);
  uint4* mine = stage + (size_t)warp * RPW * C;
  for (int i = lane; i < nrows * C; i += 32) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_addr(mine + i)), "l"(W + (size_t)row0 * C + i)
                 : "memory");
  }
  asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;" ::: "memory");
  __syncwarp();
  for (int r = 0; r < nrows; ++r) {
    float acc = 0.f;
#pragma unroll 4
    for (int c = lane; c < C; c += 32) acc += dot8(mine[(size_t)r * C + c], __ldg(x + c));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) y[row0 + r] = __float2half_rn(acc);
  }
}

__global__ void fill(__half* p, size_t n, unsigned seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    unsigned h = (unsigned)(i * 2654435761u) ^ seed;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    p[i] = __float2half_rn(((h & 0xffff) / 65536.f - 0.5f) * 0.1f);
  }
}

struct Shape {
  int n, k;
  const char* name;
};

struct Variant {
  std::string name;
  std::function<void(const __half*, const __half*, __half*, int, int, cudaStream_t)> launch;
};

template <int BATCH, int RPW, int WPR, int LK>
Variant make(int threads) {
  std::string name = "b" + std::to_string(BATCH) + " rpw" + std::to_string(RPW) + " wpr" + std::to_string(WPR) +
                     " t" + std::to_string(threads) + (LK == 1 ? " na256" : LK == 2 ? " evf" : "");
  return {name, [threads](const __half* w, const __half* x, __half* y, int n, int k, cudaStream_t s) {
            const int wpb = threads / 32;
            const long long warps = (long long)((n + RPW - 1) / RPW) * WPR;
            const unsigned blocks = (unsigned)((warps + wpb - 1) / wpb);
            gemv<BATCH, RPW, WPR, LK><<<blocks, threads, 0, s>>>(reinterpret_cast<const uint4*>(w),
                                                                  reinterpret_cast<const uint4*>(x), y, n, k / 8);
          }};
}

template <int ROWS>
Variant make_bulk(int threads) {
  return {"bulk rows" + std::to_string(ROWS) + " t" + std::to_string(threads),
          [threads](const __half* w, const __half* x, __half* y, int n, int k, cudaStream_t s) {
            const size_t smem = (size_t)ROWS * k * 2;
            static bool set = false;
            if (!set) {
              CHECK(cudaFuncSetAttribute(gemv_bulk<ROWS>, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
              set = true;
            }
            gemv_bulk<ROWS><<<(n + ROWS - 1) / ROWS, threads, smem, s>>>(reinterpret_cast<const uint4*>(w),
                                                                         reinterpret_cast<const uint4*>(x), y, n, k / 8);
          }};
}

template <int RPW>
Variant make_async(int threads) {
  return {"async rpw" + std::to_string(RPW) + " t" + std::to_string(threads),
          [threads](const __half* w, const __half* x, __half* y, int n, int k, cudaStream_t s) {
            const int warps = threads / 32;
            const size_t smem = (size_t)warps * RPW * k * 2;
            static bool set = false;
            if (!set) {
              CHECK(cudaFuncSetAttribute(gemv_async<RPW>, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
              set = true;
            }
            const int rows_per_block = warps * RPW;
            gemv_async<RPW><<<(n + rows_per_block - 1) / rows_per_block, threads, smem, s>>>(
                reinterpret_cast<const uint4*>(w), reinterpret_cast<const uint4*>(x), y, n, k / 8);
          }};
}

int main() {
  const Shape shapes[] = {{2560, 2048, "qkv"}, {2048, 2048, "o"}, {11264, 2048, "gate-up"},
                          {2048, 5632, "down"}, {32000, 2048, "lm_head"}};
  // The first run's variants (12:51 UTC), then the second's (12:52 UTC) around the fastest.
  std::vector<Variant> variants = {
      make<4, 1, 1, 0>(128),  make<8, 1, 1, 0>(128),  make<8, 1, 1, 0>(256), make<8, 1, 1, 1>(128),
      make<8, 1, 1, 2>(128),  make<4, 2, 1, 0>(128),  make<8, 2, 1, 0>(128), make<8, 2, 1, 1>(128),
      make<4, 4, 1, 1>(128),  make<8, 1, 2, 0>(128),  make<8, 1, 2, 1>(256), make<4, 1, 4, 1>(256),
      make<8, 1, 4, 1>(256),  make<16, 1, 1, 1>(128), make<6, 1, 1, 1>(128), make<11, 1, 1, 1>(128),
      make<6, 2, 1, 1>(128),  make<2, 4, 1, 1>(128),  make_bulk<2>(64),      make_bulk<4>(128),
      make_bulk<8>(128),      make_bulk<8>(256),      make_bulk<16>(256),    make_async<1>(128),
      make_async<2>(128),     make_async<1>(256),
      make<1, 1, 1, 0>(128),  make<2, 1, 1, 0>(128),  make<3, 1, 1, 0>(128), make<4, 1, 1, 0>(64),
      make<4, 1, 1, 0>(32),   make<4, 1, 1, 0>(256),  make<4, 1, 1, 1>(128), make<2, 1, 2, 0>(128),
      make<4, 1, 2, 0>(128),  make<2, 1, 1, 0>(64),   make<5, 1, 1, 0>(128), make<2, 2, 1, 0>(128),
      make<3, 1, 1, 1>(128),
  };
  cublasHandle_t blas;
  CHECK_BLAS(cublasCreate(&blas));
  void* workspace;
  CHECK(cudaMalloc(&workspace, 32 << 20));
  CHECK_BLAS(cublasSetWorkspace(blas, workspace, 32 << 20));
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CHECK_BLAS(cublasSetStream(blas, stream));
  const float one = 1.f, zero = 0.f;
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  std::printf("| shape | variant | us/launch | GB/s | max rel diff vs cuBLAS |\n| --- | --- | --- | --- | --- |\n");
  for (const Shape& sh : shapes) {
    const size_t per = (size_t)sh.n * sh.k;
    const int copies = (int)std::max<size_t>(4, (size_t)(600ull << 20) / (per * 2));
    __half *w, *x, *y, *ref;
    CHECK(cudaMalloc(&w, per * 2 * copies));
    CHECK(cudaMalloc(&x, (size_t)sh.k * 2 * copies));
    CHECK(cudaMalloc(&y, (size_t)sh.n * 2 * copies));
    CHECK(cudaMalloc(&ref, (size_t)sh.n * 2));
    fill<<<1024, 256>>>(w, per * copies, 1u);
    fill<<<64, 256>>>(x, (size_t)sh.k * copies, 7u);
    CHECK(cudaDeviceSynchronize());
    auto time_graph = [&](const std::function<void(int)>& one_launch) {
      cudaGraph_t graph;
      cudaGraphExec_t exec;
      CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
      for (int i = 0; i < copies; ++i) one_launch(i);
      CHECK(cudaStreamEndCapture(stream, &graph));
      CHECK(cudaGraphInstantiate(&exec, graph, 0));
      for (int i = 0; i < 3; ++i) CHECK(cudaGraphLaunch(exec, stream));
      std::vector<float> times;
      for (int rep = 0; rep < 7; ++rep) {
        CHECK(cudaEventRecord(e0, stream));
        for (int i = 0; i < 5; ++i) CHECK(cudaGraphLaunch(exec, stream));
        CHECK(cudaEventRecord(e1, stream));
        CHECK(cudaEventSynchronize(e1));
        float ms;
        CHECK(cudaEventElapsedTime(&ms, e0, e1));
        times.push_back(ms * 1000.f / (5 * copies));
      }
      CHECK(cudaGraphExecDestroy(exec));
      CHECK(cudaGraphDestroy(graph));
      std::sort(times.begin(), times.end());
      return times[times.size() / 2];
    };
    auto blas_call = [&](int i) {
      CHECK_BLAS(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, sh.n, 1, sh.k, &one, w + per * i, CUDA_R_16F, sh.k,
                              x + (size_t)sh.k * i, CUDA_R_16F, sh.k, &zero, y + (size_t)sh.n * i, CUDA_R_16F, sh.n,
                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    };
    blas_call(0);
    CHECK(cudaMemcpyAsync(ref, y, sh.n * 2, cudaMemcpyDeviceToDevice, stream));
    CHECK(cudaStreamSynchronize(stream));
    std::vector<__half> href(sh.n), hy(sh.n);
    CHECK(cudaMemcpy(href.data(), ref, sh.n * 2, cudaMemcpyDeviceToHost));
    const double gb = per * 2 / 1e3;  // bytes / 1e3 -> GB/s when divided by us
    const float tb = time_graph(blas_call);
    std::printf("| %d x %d %s | cuBLAS | %.2f | %.0f | |\n", sh.n, sh.k, sh.name, tb, gb / tb);
    for (const auto& v : variants) {
      CHECK(cudaMemsetAsync(y, 0xff, sh.n * 2, stream));
      v.launch(w, x, y, sh.n, sh.k, stream);
      CHECK(cudaStreamSynchronize(stream));
      CHECK(cudaGetLastError());
      CHECK(cudaMemcpy(hy.data(), y, sh.n * 2, cudaMemcpyDeviceToHost));
      double worst = 0, scale = 0;
      for (int i = 0; i < sh.n; ++i) scale = std::max(scale, (double)std::fabs(__half2float(href[i])));
      for (int i = 0; i < sh.n; ++i) {
        const double d = std::fabs((double)__half2float(hy[i]) - __half2float(href[i]));
        worst = std::max(worst, std::isnan(d) ? 1e9 : d / scale);
      }
      const float t = time_graph([&](int i) {
        v.launch(w + per * i, x + (size_t)sh.k * i, y + (size_t)sh.n * i, sh.n, sh.k, stream);
      });
      std::printf("| %d x %d %s | %s | %.2f | %.0f | %.1e |\n", sh.n, sh.k, sh.name, v.name.c_str(), t, gb / t, worst);
    }
    CHECK(cudaFree(w));
    CHECK(cudaFree(x));
    CHECK(cudaFree(y));
    CHECK(cudaFree(ref));
  }
  return 0;
}
