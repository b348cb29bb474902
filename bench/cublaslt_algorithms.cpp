// cuBLASLt's candidate algorithms for BERT-base batch-1's products (128 tokens, float32, bias and
// GELU epilogues as the JIT CUDA plugin asks for them): for each, its tile, split-K count,
// reduction scheme, workspace and time a launch, then the heuristic's first pick with the split-K
// count lowered, the first three picks under other split-K counts and reduction schemes, and the
// heuristic's first pick under smaller workspace offers. The question it answered: how much speed
// a smaller per-launch workspace costs. With 32 MiB on offer BERT-base b1 float32's graph capture
// peaked 3.2 MB above eager's call (a 6-MB split-K workspace), and a heuristic pick under 1 to 4
// MiB made the whole call 0.9 ms slower; this probe found the first pick with fewer splits far
// faster than that, which is what the plugin now runs (docs/performance.md, runs of 2026-11-29
// 23:56 and 2026-11-30 00:07, has its table).
//
// Not part of the build (a probe, as bench/matrix_vector_variants.cu): on a GPU machine,
//   g++ -O2 -std=c++17 -I/usr/local/cuda/include -o /tmp/cublaslt_algorithms bench/cublaslt_algorithms.cpp -L/usr/local/cuda/lib64 -lcublasLt -lcudart
//   /tmp/cublaslt_algorithms [float16]
//   /tmp/cublaslt_algorithms --length-sweep    (the torture test's product; see length_sweep)
// Times: the median over 15 timings of 20 back-to-back launches (CUDA events), microseconds a
// launch. Each algorithm's output is compared with the heuristic's first pick's (largest absolute
// difference over the largest output), so that a configuration that computes something else shows.
#include <cublasLt.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#define CUDA_CHECK(x)                                                                           \
  do {                                                                                          \
    cudaError_t e = (x);                                                                        \
    if (e != cudaSuccess) {                                                                     \
      std::fprintf(stderr, "CUDA error %s at %s:%d\n", cudaGetErrorString(e), __FILE__, __LINE__); \
      std::exit(1);                                                                             \
    }                                                                                           \
  } while (0)
#define LT_CHECK(x)                                                                         \
  do {                                                                                      \
    cublasStatus_t s = (x);                                                                 \
    if (s != CUBLAS_STATUS_SUCCESS) {                                                       \
      std::fprintf(stderr, "cuBLASLt status %d at %s:%d\n", static_cast<int>(s), __FILE__, __LINE__); \
      std::exit(1);                                                                         \
    }                                                                                       \
  } while (0)

namespace {

struct Case {
  const char* name;
  int m, n, k;
  cublasLtEpilogue_t epilogue;
};

// BERT-base, one sequence of 128 tokens: the packed q/k/v projection, the attention output, the
// feed-forward's two products.
const Case kCases[] = {
    {"qkv 128x2304x768 +bias", 128, 2304, 768, CUBLASLT_EPILOGUE_BIAS},
    {"attn out 128x768x768 +bias", 128, 768, 768, CUBLASLT_EPILOGUE_BIAS},
    {"ffn up 128x3072x768 +bias+gelu", 128, 3072, 768, CUBLASLT_EPILOGUE_GELU_BIAS},
    {"ffn down 128x768x3072 +bias", 128, 768, 3072, CUBLASLT_EPILOGUE_BIAS},
};

struct Problem {
  cudaDataType_t type;
  size_t element;
  const Case* c;
  void *x, *w, *bias, *out, *reference;
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t a, b, d;
};

uint32_t config(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attribute) {
  uint32_t value = 0;
  size_t written = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(&algo, attribute, &value, sizeof(value), &written) != CUBLAS_STATUS_SUCCESS) {
    return 0xffffffffu;
  }
  return value;
}

void fill(void* device, size_t count, cudaDataType_t type, uint32_t seed) {
  std::vector<float> values(count);
  uint32_t state = seed;
  for (auto& v : values) {
    state = state * 1664525u + 1013904223u;
    v = (static_cast<float>(state >> 8) / 16777216.0f - 0.5f) * 0.2f;
  }
  if (type == CUDA_R_32F) {
    CUDA_CHECK(cudaMemcpy(device, values.data(), count * 4, cudaMemcpyHostToDevice));
  } else {
    std::vector<__half> halves(count);
    for (size_t i = 0; i < count; ++i) halves[i] = __float2half(values[i]);
    CUDA_CHECK(cudaMemcpy(device, halves.data(), count * 2, cudaMemcpyHostToDevice));
  }
}

std::vector<float> read(const void* device, size_t count, cudaDataType_t type) {
  std::vector<float> values(count);
  if (type == CUDA_R_32F) {
    CUDA_CHECK(cudaMemcpy(values.data(), device, count * 4, cudaMemcpyDeviceToHost));
  } else {
    std::vector<__half> halves(count);
    CUDA_CHECK(cudaMemcpy(halves.data(), device, count * 2, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < count; ++i) values[i] = __half2float(halves[i]);
  }
  return values;
}

// Row-major out[M, N] = x[M, K] · w[N, K]ᵀ + bias, as the column-major outᵀ = w · xᵀ.
Problem make_problem(const Case& c, cudaDataType_t type) {
  Problem p{};
  p.type = type;
  p.element = type == CUDA_R_32F ? 4 : 2;
  p.c = &c;
  const size_t mk = size_t(c.m) * c.k, nk = size_t(c.n) * c.k, mn = size_t(c.m) * c.n;
  CUDA_CHECK(cudaMalloc(&p.x, mk * p.element));
  CUDA_CHECK(cudaMalloc(&p.w, nk * p.element));
  CUDA_CHECK(cudaMalloc(&p.bias, c.n * p.element));
  CUDA_CHECK(cudaMalloc(&p.out, mn * p.element));
  CUDA_CHECK(cudaMalloc(&p.reference, mn * p.element));
  fill(p.x, mk, type, 1);
  fill(p.w, nk, type, 2);
  fill(p.bias, c.n, type, 3);
  LT_CHECK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const int32_t transa = CUBLAS_OP_T, transb = CUBLAS_OP_N;
  LT_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &transa, sizeof(transa)));
  LT_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &transb, sizeof(transb)));
  LT_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &c.epilogue, sizeof(c.epilogue)));
  LT_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p.bias, sizeof(p.bias)));
  LT_CHECK(cublasLtMatrixLayoutCreate(&p.a, type, c.k, c.n, c.k));  // w: K x N column-major, op T
  LT_CHECK(cublasLtMatrixLayoutCreate(&p.b, type, c.k, c.m, c.k));  // x: K x M column-major
  LT_CHECK(cublasLtMatrixLayoutCreate(&p.d, type, c.n, c.m, c.n));  // outᵀ: N x M column-major
  return p;
}

void release(Problem& p) {
  cublasLtMatrixLayoutDestroy(p.a);
  cublasLtMatrixLayoutDestroy(p.b);
  cublasLtMatrixLayoutDestroy(p.d);
  cublasLtMatmulDescDestroy(p.desc);
  for (void* ptr : {p.x, p.w, p.bias, p.out, p.reference}) CUDA_CHECK(cudaFree(ptr));
}

void launch(cublasLtHandle_t handle, const Problem& p, const cublasLtMatmulAlgo_t& algo, void* workspace,
            size_t workspace_bytes, void* out, cudaStream_t stream) {
  const float alpha = 1.f, beta = 0.f;
  LT_CHECK(cublasLtMatmul(handle, p.desc, &alpha, p.w, p.a, p.x, p.b, &beta, out, p.d, out, p.d, &algo, workspace,
                          workspace_bytes, stream));
}

double microseconds(cublasLtHandle_t handle, const Problem& p, const cublasLtMatmulAlgo_t& algo, size_t workspace_bytes,
                    cudaStream_t stream, int timings = 15, int launches = 20) {
  void* workspace = nullptr;
  if (workspace_bytes > 0) CUDA_CHECK(cudaMalloc(&workspace, workspace_bytes));
  for (int i = 0; i < 5; ++i) launch(handle, p, algo, workspace, workspace_bytes, p.out, stream);
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<double> times;
  for (int rep = 0; rep < timings; ++rep) {
    CUDA_CHECK(cudaEventRecord(start, stream));
    for (int i = 0; i < launches; ++i) launch(handle, p, algo, workspace, workspace_bytes, p.out, stream);
    CUDA_CHECK(cudaEventRecord(stop, stream));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(1000.0 * ms / launches);
  }
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  if (workspace != nullptr) CUDA_CHECK(cudaFree(workspace));
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// The largest difference of p.out from the reference, over the reference's largest magnitude.
double difference(const Problem& p) {
  const size_t mn = size_t(p.c->m) * p.c->n;
  const auto got = read(p.out, mn, p.type), want = read(p.reference, mn, p.type);
  double largest = 0, diff = 0;
  for (size_t i = 0; i < mn; ++i) {
    largest = std::max(largest, std::fabs(double(want[i])));
    if (!std::isfinite(got[i])) return INFINITY;  // unwritten (NaN-filled) or overflowed
    diff = std::max(diff, std::fabs(double(got[i]) - double(want[i])));
  }
  return largest > 0 ? diff / largest : diff;
}

// No alignment preferences, unlike the plugin's: every pointer here comes from cudaMalloc and
// every leading dimension is a multiple of 256 bytes, the most the plugin would state.
std::vector<cublasLtMatmulHeuristicResult_t> candidates(cublasLtHandle_t handle, const Problem& p, uint64_t max_workspace,
                                                        int count) {
  cublasLtMatmulPreference_t preference;
  LT_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  LT_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_workspace,
                                                sizeof(max_workspace)));
  std::vector<cublasLtMatmulHeuristicResult_t> results(count);
  int found = 0;
  LT_CHECK(cublasLtMatmulAlgoGetHeuristic(handle, p.desc, p.a, p.b, p.d, p.d, preference, count, results.data(), &found));
  LT_CHECK(cublasLtMatmulPreferenceDestroy(preference));
  results.resize(found);
  return results;
}

void row(const char* what, const cublasLtMatmulAlgo_t& algo, size_t workspace, double us, double diff, float waves) {
  std::printf("| %s | %u | %u | %u | %u | %.2f | %.2f | %.1f | %.1e |\n", what, config(algo, CUBLASLT_ALGO_CONFIG_ID),
              config(algo, CUBLASLT_ALGO_CONFIG_TILE_ID), config(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
              config(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME), workspace / 1048576.0, waves, us, diff);
}

void study(cublasLtHandle_t handle, const Case& c, cudaDataType_t type, cudaStream_t stream) {
  Problem p = make_problem(c, type);
  std::printf("\n### %s, %s\n\n", c.name, type == CUDA_R_32F ? "float32" : "float16");
  std::printf("| candidate | algo | tile | split-K | reduction | workspace MiB | waves | us a launch | difference |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  auto all = candidates(handle, p, 32ull << 20, 32);
  if (all.empty()) {
    std::printf("(no algorithm)\n");
    release(p);
    return;
  }
  // The reference: the heuristic's first pick with 32 MiB on offer, what the plugin runs today
  // (its own row's difference is then the run-to-run one, 0 for a deterministic algorithm).
  {
    void* workspace = nullptr;
    if (all[0].workspaceSize > 0) CUDA_CHECK(cudaMalloc(&workspace, all[0].workspaceSize));
    launch(handle, p, all[0].algo, workspace, all[0].workspaceSize, p.reference, stream);
    CUDA_CHECK(cudaStreamSynchronize(stream));
    if (workspace != nullptr) CUDA_CHECK(cudaFree(workspace));
  }
  for (size_t i = 0; i < all.size(); ++i) {
    CUDA_CHECK(cudaMemsetAsync(p.out, 0xff, size_t(c.m) * c.n * p.element, stream));  // NaN: an unwritten element shows
    const double us = microseconds(handle, p, all[i].algo, all[i].workspaceSize, stream);
    row(("heuristic #" + std::to_string(i)).c_str(), all[i].algo, all[i].workspaceSize, us, difference(p), all[i].wavesCount);
  }
  // The first pick with fewer splits: what its workspace and time become.
  const uint32_t splits = config(all[0].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM);
  for (uint32_t s : {1u, 2u, 4u, 8u, 16u}) {
    if (splits == 0xffffffffu || s >= splits) continue;
    cublasLtMatmulAlgo_t algo = all[0].algo;
    if (cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &s, sizeof(s)) != CUBLAS_STATUS_SUCCESS) continue;
    cublasLtMatmulHeuristicResult_t checked{};
    if (cublasLtMatmulAlgoCheck(handle, p.desc, p.a, p.b, p.d, p.d, &algo, &checked) != CUBLAS_STATUS_SUCCESS) {
      std::printf("| #0 with split-K %u: refused by cublasLtMatmulAlgoCheck | | | | | | | | |\n", s);
      continue;
    }
    CUDA_CHECK(cudaMemsetAsync(p.out, 0xff, size_t(c.m) * c.n * p.element, stream));
    const double us = microseconds(handle, p, algo, checked.workspaceSize, stream);
    row(("#0 with split-K " + std::to_string(s)).c_str(), algo, checked.workspaceSize, us, difference(p), checked.wavesCount);
  }
  // The first three picks with other split-K counts and reduction schemes: in place (partial sums
  // added in the output, workspace only for counters), or through a workspace of the compute or
  // the output type. Which of them keep the time with a small workspace.
  const std::pair<uint32_t, const char*> schemes[] = {{CUBLASLT_REDUCTION_SCHEME_INPLACE, "in place"},
                                                      {CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE, "compute type"},
                                                      {CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE, "output type"}};
  for (size_t i = 0; i < std::min<size_t>(3, all.size()); ++i) {
    for (uint32_t s : {2u, 3u, 4u, 6u, 8u, 12u, 16u}) {
      for (const auto& [scheme, scheme_name] : schemes) {
        cublasLtMatmulAlgo_t algo = all[i].algo;
        if (cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &s, sizeof(s)) != CUBLAS_STATUS_SUCCESS ||
            cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme, sizeof(scheme)) !=
                CUBLAS_STATUS_SUCCESS) {
          continue;
        }
        cublasLtMatmulHeuristicResult_t checked{};
        if (cublasLtMatmulAlgoCheck(handle, p.desc, p.a, p.b, p.d, p.d, &algo, &checked) != CUBLAS_STATUS_SUCCESS) continue;
        CUDA_CHECK(cudaMemsetAsync(p.out, 0xff, size_t(c.m) * c.n * p.element, stream));
        const double us = microseconds(handle, p, algo, checked.workspaceSize, stream);
        row(("#" + std::to_string(i) + " split-K " + std::to_string(s) + ", " + scheme_name).c_str(), algo,
            checked.workspaceSize, us, difference(p), checked.wavesCount);
      }
    }
  }
  // The heuristic's first pick under smaller offers.
  for (uint64_t mib : {1ull, 2ull, 4ull, 8ull}) {
    auto under = candidates(handle, p, mib << 20, 1);
    if (under.empty()) continue;
    CUDA_CHECK(cudaMemsetAsync(p.out, 0xff, size_t(c.m) * c.n * p.element, stream));
    const double us = microseconds(handle, p, under[0].algo, under[0].workspaceSize, stream);
    row(("first pick under " + std::to_string(mib) + " MiB").c_str(), under[0].algo, under[0].workspaceSize, us,
        difference(p), under[0].wavesCount);
  }
  release(p);
}

// The dynamic-shape torture test's product (examples/dynamic_shapes: Linear(1024, 1024) + ReLU in
// float32, 32 sequences of 100 to 1000 positions) at every sixth length: the heuristic's first eight
// picks, each timed, as CSV. Its question: whether the staircase of time against length (the
// product's waves) is the first pick's alone, or whether another pick, or a rule over the picks'
// wavesCount, runs closer to a line at about the same speed.
void length_sweep(cublasLtHandle_t handle, cudaStream_t stream) {
  std::printf("length,rank,algo,tile,splitk,stages,waves,workspace,us\n");
  for (int length = 100; length <= 1000; length += 6) {
    const Case c{"sweep", 32 * length, 1024, 1024, CUBLASLT_EPILOGUE_RELU_BIAS};
    Problem p = make_problem(c, CUDA_R_32F);
    const auto all = candidates(handle, p, 32ull << 20, 8);
    for (size_t i = 0; i < all.size(); ++i) {
      const double us = microseconds(handle, p, all[i].algo, all[i].workspaceSize, stream, 5, 4);
      std::printf("%d,%zu,%u,%u,%u,%u,%.3f,%zu,%.1f\n", length, i, config(all[i].algo, CUBLASLT_ALGO_CONFIG_ID),
                  config(all[i].algo, CUBLASLT_ALGO_CONFIG_TILE_ID), config(all[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
                  config(all[i].algo, CUBLASLT_ALGO_CONFIG_STAGES_ID), all[i].wavesCount, all[i].workspaceSize, us);
    }
    release(p);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const bool half = argc > 1 && std::strcmp(argv[1], "float16") == 0;
  const bool sweep = argc > 1 && std::strcmp(argv[1], "--length-sweep") == 0;
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "no CUDA device: this probe times cuBLASLt on a GPU\n");
    return 1;
  }
  cublasLtHandle_t handle;
  LT_CHECK(cublasLtCreate(&handle));
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaDeviceProp properties{};
  CUDA_CHECK(cudaGetDeviceProperties(&properties, 0));
  std::printf("%s, %d SMs, cuBLASLt %zu\n", properties.name, properties.multiProcessorCount, cublasLtGetVersion());
  if (sweep) {
    length_sweep(handle, stream);
  } else {
    for (const auto& c : kCases) study(handle, c, half ? CUDA_R_16F : CUDA_R_32F, stream);
  }
  CUDA_CHECK(cudaStreamDestroy(stream));
  LT_CHECK(cublasLtDestroy(handle));
  return 0;
}
