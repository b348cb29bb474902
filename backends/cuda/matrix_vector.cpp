#include "backends/cuda/matrix_vector.h"

#include <algorithm>
#include <climits>
#include <stdexcept>

#include <fmt/format.h>

#include "backends/cuda/matrix_geometry.h"
#include "backends/cuda/programmatic_launch.h"

namespace zenith::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
// Warps a multiprocessor should have at work before a row's dot product is split further: with
// 2048 rows on the H200's 132, two warps a row measured 4.1 us against 4.2 for one (o projection)
// and 8.4 against 8.7 (down projection); with 2560 rows or more, one warp a row was as fast or
// faster (docs/performance.md, 2026-11-28).
constexpr std::int64_t kWarpsPerMultiprocessor = 16;
constexpr std::int64_t kVectorBytes = 16;

const char* dtype_word(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::ScalarType::Half: return "f16";
    case c10::ScalarType::BFloat16: return "bf16";
    default: return "f32";
  }
}

const char* epilogue_word(MatmulEpilogue epilogue) {
  switch (epilogue) {
    case MatmulEpilogue::Relu: return "relu";
    case MatmulEpilogue::GeluTanh: return "gelu_tanh";
    case MatmulEpilogue::None: break;
  }
  return "none";
}

// A 16-bit element type's code: eight elements to a 16-byte vector, read as four pairs.
std::string sixteen_bit_code(const char* header, const char* type, const char* pair, const char* to_float,
                             const char* from_float, const char* pair_to_float2) {
  return fmt::format(R"(#include <{0}>
typedef {1} T;
__device__ __forceinline__ float to_float(T v) {{ return {3}(v); }}
__device__ __forceinline__ T from_float(float v) {{ return {4}(v); }}
__device__ __forceinline__ float dot16(uint4 w, uint4 a) {{
  const {2}* wh = reinterpret_cast<const {2}*>(&w);
  const {2}* ah = reinterpret_cast<const {2}*>(&a);
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {{
    const float2 wf = {5}(wh[i]), af = {5}(ah[i]);
    sum = fmaf(wf.x, af.x, sum);
    sum = fmaf(wf.y, af.y, sum);
  }}
  return sum;
}}
)",
                     header, type, pair, to_float, from_float, pair_to_float2);
}

// The element type and its conversions; dot16 multiplies two 16-byte vectors of it, in float32.
std::string element_code(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::ScalarType::Half:
      return sixteen_bit_code("cuda_fp16.h", "__half", "__half2", "__half2float", "__float2half_rn", "__half22float2");
    case c10::ScalarType::BFloat16:
      return sixteen_bit_code("cuda_bf16.h", "__nv_bfloat16", "__nv_bfloat162", "__bfloat162float", "__float2bfloat16_rn",
                              "__bfloat1622float2");
    default:
      return R"(typedef float T;
__device__ __forceinline__ float to_float(T v) { return v; }
__device__ __forceinline__ T from_float(float v) { return v; }
__device__ __forceinline__ float dot16(uint4 w, uint4 a) {
  const float4 wf = *reinterpret_cast<const float4*>(&w), af = *reinterpret_cast<const float4*>(&a);
  return fmaf(wf.w, af.w, fmaf(wf.z, af.z, fmaf(wf.y, af.y, wf.x * af.x)));
}
)";
  }
}

std::string epilogue_code(MatmulEpilogue epilogue) {
  switch (epilogue) {
    case MatmulEpilogue::Relu: return "  return fmaxf(v, 0.f);\n";
    case MatmulEpilogue::GeluTanh:
      return "  return 0.5f * v * (1.f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));\n";
    case MatmulEpilogue::None: break;
  }
  return "  return v;\n";
}

// The body, the same for every dtype. Lane `lane` of warp part `part` reads the 16-byte chunks
// (part * 32 + lane) + i * (warps per element * 32) of the weight row: consecutive lanes read
// consecutive chunks, so each warp's loads are whole 512-byte lines. A batch's four weight loads
// are issued before any is used, and none sits in a branch of its own (loads in such branches
// went out one after another, each waiting on the last: the decode attention's SASS showed it,
// see attention_codegen.cpp). One warp a weight row and batches of four measured fastest of 39
// variants on an H200 (docs/performance.md, 2026-11-28); batches of eight made the compiler use
// the first load before issuing the rest.
constexpr const char* kBody = R"(
extern "C" __global__ void __launch_bounds__(128) NAME(
    const T* __restrict__ a, const T* __restrict__ w, long long ldw, const T* __restrict__ bias,
    T* __restrict__ out, int n, int k, int warps_per_element) {
  constexpr int kVec = 16 / sizeof(T);
  constexpr int kBatch = 4;
  __shared__ float partial[4];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const long long element = (long long)blockIdx.x * (4 / warps_per_element) + warp / warps_per_element;
  const int part = warp % warps_per_element;
  const bool valid = element < n;
  float acc = 0.f;
  const T* row = w + (valid ? element : 0) * ldw;
  const int step = warps_per_element * 32 * kVec;
  int k0 = (part * 32 + lane) * kVec;
  // The first batch of the weight is loaded before the wait: launched as a programmatic dependent
  // launch (backends/cuda/programmatic_launch.h, only when nothing in the plan's graph writes the
  // weight) the loads are in flight while the kernel before this one finishes; A and the output
  // are touched only after it. Launched as usual, the wait returns at once. After it, the kernel
  // after this one may start (zn_follow_kernel_before in the other generated kernels).
  uint4 wv[kBatch];
  const bool first_batch = valid && k0 + (kBatch - 1) * step < k;
  if (first_batch) {
#pragma unroll
    for (int j = 0; j < kBatch; ++j) wv[j] = __ldg(reinterpret_cast<const uint4*>(row + k0 + j * step));
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
  if (first_batch) {
    uint4 av[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) av[j] = __ldg(reinterpret_cast<const uint4*>(a + k0 + j * step));
#pragma unroll
    for (int j = 0; j < kBatch; ++j) acc += dot16(wv[j], av[j]);
    k0 += kBatch * step;
  }
  if (valid) {
    for (; k0 + (kBatch - 1) * step < k; k0 += kBatch * step) {
      uint4 av[kBatch];
#pragma unroll
      for (int j = 0; j < kBatch; ++j) wv[j] = __ldg(reinterpret_cast<const uint4*>(row + k0 + j * step));
#pragma unroll
      for (int j = 0; j < kBatch; ++j) av[j] = __ldg(reinterpret_cast<const uint4*>(a + k0 + j * step));
#pragma unroll
      for (int j = 0; j < kBatch; ++j) acc += dot16(wv[j], av[j]);
    }
    if (k0 < k) {
      // The last batch, partial: a chunk past K reads the batch's first chunk again (in bounds,
      // so that the loads need no branch) and is not added (a select: 0 * inf would be NaN).
      uint4 av[kBatch];
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const int at = k0 + j * step < k ? k0 + j * step : k0;
        wv[j] = __ldg(reinterpret_cast<const uint4*>(row + at));
        av[j] = __ldg(reinterpret_cast<const uint4*>(a + at));
      }
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const float d = dot16(wv[j], av[j]);
        acc += k0 + j * step < k ? d : 0.f;
      }
    }
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, offset);
  if (warps_per_element > 1) {
    if (lane == 0) partial[warp] = acc;
    __syncthreads();
    if (lane == 0 && part == 0) {
      acc = 0.f;
      for (int j = 0; j < warps_per_element; ++j) acc += partial[warp + j];
    }
  }
  if (!valid || part != 0 || lane != 0) return;
  const float b = bias != nullptr ? to_float(bias[element]) : 0.f;
  out[element] = from_float(epilogue(acc + b));
}
)";

std::int64_t vector_elements(c10::ScalarType dtype) { return kVectorBytes / element_size(dtype); }

bool aligned(const void* pointer) { return reinterpret_cast<std::uintptr_t>(pointer) % kVectorBytes == 0; }

const DLTensor* tensor_at(const std::vector<const DLTensor*>& tensors, int index) {
  if (index < 0 || static_cast<std::size_t>(index) >= tensors.size()) return nullptr;
  return tensors[index];
}

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw std::runtime_error(fmt::format("{}: {}", what, cudaGetErrorString(status)));
}

}  // namespace

bool has_matrix_vector_form(const MatmulProgram& program) {
  return program.leading == LeadingDims::FoldIntoRows && program.b_rank == 2 && program.b_order == MatrixOrder::ColumnMajor;
}

bool matrix_vector_may_serve(const MatmulProgram& program, const ir::Graph& group) {
  const auto in_group = [&](int input) { return input >= 0 && static_cast<std::size_t>(input) < group.inputs.size(); };
  if (!has_matrix_vector_form(program) || !in_group(program.a_input) || !in_group(program.b_input)) return false;
  const auto& a = group.value(group.inputs[program.a_input]).type;
  const auto& b = group.value(group.inputs[program.b_input]).type;
  // One row: A's sizes other than K are all 1 (the signature's sizes are the launches' sizes).
  const bool one_row = a.rank() >= 1 && a.sizes.back() > 0 && a.numel() == a.sizes.back();
  return one_row && b.numel() * element_size(program.dtype) <= kMatrixVectorMaxWeightBytes;
}

std::string matrix_vector_name(const MatmulProgram& program) {
  return fmt::format("zenith_matvec_{}_{}{}", dtype_word(program.dtype), epilogue_word(program.epilogue),
                     program.bias_input >= 0 ? "_bias" : "");
}

std::string matrix_vector_source(const MatmulProgram& program) {
  std::string body = kBody;
  const std::string name = matrix_vector_name(program);
  body.replace(body.find("NAME"), 4, name);
  return "// " + name + ": out[r, n] = epilogue(sum_k a[r, k] * w[n, k] + bias[n]) (backends/cuda/matrix_vector.h)\n" +
         element_code(program.dtype) + "__device__ __forceinline__ float epilogue(float v) {\n" +
         epilogue_code(program.epilogue) + "}\n" + body;
}

std::optional<MatrixVectorLaunch> matrix_vector_fit(const MatmulProgram& program,
                                                    const std::vector<const DLTensor*>& inputs,
                                                    const std::vector<const DLTensor*>& outputs) {
  if (!has_matrix_vector_form(program) || outputs.size() != 1 || outputs[0] == nullptr) return std::nullopt;
  const DLTensor* a = tensor_at(inputs, program.a_input);
  const DLTensor* w = tensor_at(inputs, program.b_input);
  const DLTensor* out = outputs[0];
  if (a == nullptr || w == nullptr || a->ndim < 1 || w->ndim != 2 || out->ndim != a->ndim) return std::nullopt;
  for (const DLTensor* t : {a, w, out}) {
    if (!has_dtype(*t, program.dtype) || t->device.device_type != kDLCUDA) return std::nullopt;
  }
  const auto a_dims = dims_of(*a), w_dims = dims_of(*w), out_dims = dims_of(*out);
  const auto av = view_matrices(a_dims.sizes.data(), a_dims.strides.data(), a_dims.rank(), LeadingDims::FoldIntoRows, false);
  const auto bv = view_matrices(w_dims.sizes.data(), w_dims.strides.data(), 2, LeadingDims::FoldIntoRows,
                                program.b_stored_transposed);
  const auto ov =
      view_matrices(out_dims.sizes.data(), out_dims.strides.data(), out_dims.rank(), LeadingDims::FoldIntoRows, false);
  if (!av || !bv || !ov) return std::nullopt;
  MatrixVectorLaunch launch;
  launch.k = av->cols.count;
  launch.n = bv->cols.count;
  const std::int64_t vec = vector_elements(program.dtype);
  if (av->rows.count != 1 || launch.n < 1 || launch.k < 1 || launch.k % vec != 0 ||
      launch.k > INT_MAX || launch.n > INT_MAX || bv->rows.count != launch.k ||
      launch.n * launch.k * element_size(program.dtype) > kMatrixVectorMaxWeightBytes) {
    return std::nullopt;
  }
  // Unit stride along K for A and B (B read as [K, N]: column n is the weight's row n, whatever
  // tensor holds it); the weight's rows 16 bytes apart (A's one row has no stride that matters).
  if (av->cols.stride != 1 || bv->rows.stride != 1) return std::nullopt;
  launch.ldw = launch.n > 1 ? bv->cols.stride : launch.k;
  if (launch.ldw % vec != 0) return std::nullopt;
  if (ov->rows.count != 1 || ov->cols.count != launch.n ||
      !is_contiguous(out_dims.sizes.data(), out_dims.strides.data(), out_dims.rank())) {
    return std::nullopt;
  }
  launch.a = address(*a);
  launch.w = address(*w);
  launch.out = address(*out);
  if (!aligned(launch.a) || !aligned(launch.w)) return std::nullopt;
  if (program.bias_input >= 0) {
    const DLTensor* bias = tensor_at(inputs, program.bias_input);
    if (bias == nullptr || !has_dtype(*bias, program.dtype) || bias->device.device_type != kDLCUDA ||
        !is_packed_vector(dims_of(*bias), launch.n)) {
      return std::nullopt;
    }
    launch.bias = address(*bias);
  }
  const auto device = out->device.device_id;
  if (a->device.device_id != device || w->device.device_id != device) return std::nullopt;
  launch.element_bytes = static_cast<int>(element_size(program.dtype));
  return launch;
}

int matrix_vector_warps_per_element(std::int64_t n, std::int64_t k, int element_bytes, int multiprocessors) {
  const std::int64_t chunks = k * element_bytes / kVectorBytes;  // 16-byte chunks per row
  int warps = 1;
  while (warps < kWarps) {
    if (n * warps >= kWarpsPerMultiprocessor * static_cast<std::int64_t>(multiprocessors)) break;
    if (chunks < static_cast<std::int64_t>(warps) * 2 * 32) break;  // each lane keeps at least one chunk
    warps *= 2;
  }
  return warps;
}

void launch_matrix_vector(const void* function, const MatrixVectorLaunch& launch, int multiprocessors,
                          cudaStream_t stream, bool early) {
  int warps = matrix_vector_warps_per_element(launch.n, launch.k, launch.element_bytes, multiprocessors);
  const std::int64_t per_block = kWarps / warps;
  const auto blocks = static_cast<unsigned>((launch.n + per_block - 1) / per_block);
  long long ldw = launch.ldw;
  int n = static_cast<int>(launch.n), k = static_cast<int>(launch.k);
  const void* a = launch.a;
  const void* w = launch.w;
  const void* bias = launch.bias;
  void* out = launch.out;
  void* params[] = {&a, &w, &ldw, &bias, &out, &n, &k, &warps};
  check(launch_generated_kernel(function, dim3(blocks), dim3(kThreads), params, stream, early),
        "launching the matrix-vector kernel");
}

}  // namespace zenith::cuda
