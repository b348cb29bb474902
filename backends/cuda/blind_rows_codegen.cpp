#include "backends/cuda/blind_rows_codegen.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "backends/cuda/expression_rules.h"
#include "backends/cuda/operand_checks.h"
#include "core/attention_blind_rows.h"
#include "core/node_arguments.h"

namespace zenith::cuda {
namespace {

// A blind row computed by one warp as the model wrote attention out (T: the storage type of
// every operand; D, DV: the query's and the value's head dimensions; NV: DV over 32, rounded up;
// ROUND(x): x rounded to T). Shared by this op's kernel and the decode attention's, which computes
// the blind rows of its own result (attention_codegen.h).
constexpr const char* kBlindRowCode = R"(
#ifndef ZN_NEG_INF
#define ZN_NEG_INF __int_as_float(0xff800000)
#endif

// Every lane's value combined over the warp: the largest (MAX) or the sum.
template <bool MAX>
__device__ __forceinline__ float zn_warp_all(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float other = __shfl_xor_sync(0xffffffffu, v, o);
    v = MAX ? fmaxf(v, other) : v + other;
  }
  return v;
}

// One query row's operands: its query and mask rows, its head's keys and values, each with its
// strides in elements (between keys, along the head dimension).
struct ZnBlindRow {
  const T* q; long long qd;
  const T* k; long long ks, kd;
  const T* v; long long vs, vd;
  const T* mask; long long mk;
  long long keys;
  float scale;
};

// Key j's logit as eager computes the written-out scores: matmul, mul by the scale, add the mask,
// each result held in T.
__device__ __forceinline__ float zn_blind_logit(const ZnBlindRow& r, long long j) {
  const T* kj = r.k + j * r.ks;
  float s = 0.f;
  for (int d = 0; d < D; ++d) s = fmaf(zn_load(r.q + d * r.qd), zn_load(kj + d * r.kd), s);
  return ROUND(ROUND(ROUND(s) * r.scale) + zn_load(r.mask + j * r.mk));
}

// The row as written, by the calling warp, into out (stride od along DV): the softmax's maximum
// and sum over every key, then the weighted values. The logits are computed again in each sweep
// rather than held: such rows are rare and their number unbounded.
__device__ void zn_blind_row(const ZnBlindRow& r, T* out, long long od) {
  const int lane = threadIdx.x & 31;
  float largest = ZN_NEG_INF;
  for (long long j = lane; j < r.keys; j += 32) largest = fmaxf(largest, zn_blind_logit(r, j));
  largest = zn_warp_all<true>(largest);
  float sum = 0.f;
  for (long long j = lane; j < r.keys; j += 32) sum += expf(zn_blind_logit(r, j) - largest);
  sum = zn_warp_all<false>(sum);
  float acc[NV];
#pragma unroll
  for (int e = 0; e < NV; ++e) acc[e] = 0.f;
  for (long long j0 = 0; j0 < r.keys; j0 += 32) {
    const long long j = j0 + lane;
    // The softmax's result is held in T, as eager's is before its product with the values.
    const float weight = j < r.keys ? ROUND(expf(zn_blind_logit(r, j) - largest) / sum) : 0.f;
    const int n = (int)min(32ll, r.keys - j0);
    for (int i = 0; i < n; ++i) {
      const float w = __shfl_sync(0xffffffffu, weight, i);
      const T* vj = r.v + (j0 + i) * r.vs;
#pragma unroll
      for (int e = 0; e < NV; ++e) {
        const int d = lane + 32 * e;
        if (d < DV) acc[e] = fmaf(w, zn_load(vj + d * r.vd), acc[e]);
      }
    }
  }
#pragma unroll
  for (int e = 0; e < NV; ++e) {
    const int d = lane + 32 * e;
    if (d < DV) zn_store(out + d * od, acc[e]);
  }
}
)";

// The kernel's body past its constants, types and kBlindRowCode (LIMIT: the blind-row limit;
// THREADS). Arguments as pack_blind_rows_arguments lays them out.
constexpr const char* kBody = R"(
struct Args {
  long long batch, heads, rows, keys;
  double scale;
  const void* a; long long as[4];
  const void* q; long long qs[4];
  const void* k; long long ks[4];
  const void* v; long long vs[4];
  const void* mask; long long ms[4];
  void* out; long long os[4];
};

extern "C" __global__ void __launch_bounds__(THREADS) NAME(const Args p) {
  zn_follow_kernel_before();
  const int lane = threadIdx.x & 31;
  const long long row = (long long)blockIdx.x * (THREADS / 32) + (threadIdx.x >> 5);
  if (row >= p.batch * p.heads * p.rows) return;  // the whole warp
  const long long t = row % p.rows, bh = row / p.rows, h = bh % p.heads, b = bh / p.heads;
  const T* mask = reinterpret_cast<const T*>(p.mask) + b * p.ms[0] + h * p.ms[1] + t * p.ms[2];
  T* out = reinterpret_cast<T*>(p.out) + b * p.os[0] + h * p.os[1] + t * p.os[2];
  // The fused row, loaded before the mask is weighed so that both loads are in flight together:
  // for a row that sees a key the kernel is a copy, bound by its loads' latency.
  const T* a = reinterpret_cast<const T*>(p.a) + b * p.as[0] + h * p.as[1] + t * p.as[2];
  float fused[NV];
#pragma unroll
  for (int e = 0; e < NV; ++e) {
    const int d = lane + 32 * e;
    fused[e] = d < DV ? zn_load(a + d * p.as[3]) : 0.f;
  }

  float top = ZN_NEG_INF;
  for (long long j = lane; j < p.keys; j += 32) top = fmaxf(top, zn_load(mask + j * p.ms[3]));
  top = zn_warp_all<true>(top);
  if (!(top < LIMIT)) {
    // A row that sees a key: the fused kernels' result stands (float holds every T exactly).
#pragma unroll
    for (int e = 0; e < NV; ++e) {
      const int d = lane + 32 * e;
      if (d < DV) zn_store(out + d * p.os[3], fused[e]);
    }
    return;
  }
  const ZnBlindRow blind{reinterpret_cast<const T*>(p.q) + b * p.qs[0] + h * p.qs[1] + t * p.qs[2], p.qs[3],
                         reinterpret_cast<const T*>(p.k) + b * p.ks[0] + h * p.ks[1], p.ks[2], p.ks[3],
                         reinterpret_cast<const T*>(p.v) + b * p.vs[0] + h * p.vs[1], p.vs[2], p.vs[3],
                         mask, p.ms[3], p.keys, (float)p.scale};
  zn_blind_row(blind, out, p.os[3]);
}
)";

// The most value elements per row a warp accumulates in registers (NV = 8 a lane).
constexpr std::int64_t kMaxValueDim = 256;

class Generator {
 public:
  explicit Generator(const ir::Graph& group) : group_(group) {}

  BlindRowsKernel run() {
    if (group_.nodes.size() != 1) throw Unsupported{"a blind-rows group holds one node"};
    check_group_shape(group_);
    const auto& node = group_.nodes.front();
    if (node.outputs.size() != 1) throw Unsupported{"attention_blind_rows with more than one result"};
    kernel_.operands = group_.inputs;
    kernel_.operands.push_back(node.outputs.front());
    for (int id : kernel_.operands) check_operand(group_, id);
    kernel_.attention = position(node, "attention");
    kernel_.query = position(node, "query");
    kernel_.key_input = position(node, "key");
    kernel_.value = position(node, "value");
    kernel_.mask = position(node, "attn_mask");
    const auto scale = ir::number_arg(node, "scale");
    if (!scale) throw Unsupported{"a blind-rows scale that is not a number"};
    kernel_.scale = *scale;

    const auto& a = type_of(node, "attention");
    const auto& q = type_of(node, "query");
    const auto& k = type_of(node, "key");
    const auto& v = type_of(node, "value");
    const auto& m = type_of(node, "attn_mask");
    const auto& out = group_.value(node.outputs.front()).type;
    for (const auto* t : {&a, &k, &v, &m, &out}) {
      if (t->dtype != q.dtype) {
        throw Unsupported{fmt::format("attention_blind_rows over {} beside a query of {}: one dtype expected",
                                      c10::toString(t->dtype), c10::toString(q.dtype))};
      }
    }
    const char* type = storage_type(q.dtype);
    if (type == nullptr || q.dtype == c10::ScalarType::Bool) {
      throw Unsupported{fmt::format("attention_blind_rows in {}", c10::toString(q.dtype))};
    }
    if (q.rank() != 4 || k.rank() != 4 || v.rank() != 4 || a.rank() != 4 || out.rank() != 4 || m.rank() > 4) {
      throw Unsupported{"attention_blind_rows over operands not of rank 4"};
    }
    const std::int64_t d = q.sizes[3], dv = v.sizes[3];
    if (k.sizes[3] != d || a.sizes != out.sizes || out.sizes[3] != dv || out.sizes[2] != q.sizes[2]) {
      throw Unsupported{fmt::format("query {}, key {}, value {}, result {}: the sizes of one attention expected",
                                    q.to_string(), k.to_string(), v.to_string(), out.to_string())};
    }
    if (dv > kMaxValueDim) {
      throw Unsupported{fmt::format("a value head dimension of {}, above the {} a warp holds", dv, kMaxValueDim)};
    }
    kernel_.key = fmt::format("blind rows v{} | {} | D {} | Dv {}", kBlindRowsCodegenVersion, type, d, dv);
    kernel_.name = fmt::format("zenith_blind_{:016x}", key_hash(kernel_.key));
    kernel_.source = fmt::format(
        "{}\n// {}\ntypedef {} T;\n#define NAME {}\n#define D {}\n#define DV {}\n#define NV {}\n#define ROUND(x) {}\n"
        "#define LIMIT {}\n#define THREADS {}\n{}{}",
        device_prelude(), kernel_.key, type, kernel_.name, d, dv, (dv + 31) / 32, rounded("(x)", q.dtype),
        float_literal(ir::kBlindRowMaskLimit), kBlindRowsThreads, kBlindRowCode, kBody);
    return kernel_;
  }

 private:
  const ir::TensorType& type_of(const ir::Node& node, const char* role) const {
    return group_.value(ir::tensor_arg(node, role)).type;
  }

  // The operand position of the group input the node reads as `role`.
  int position(const ir::Node& node, const char* role) const {
    const int id = ir::tensor_arg(node, role);
    for (std::size_t i = 0; i < group_.inputs.size(); ++i) {
      if (id >= 0 && group_.inputs[i] == id) return static_cast<int>(i);
    }
    throw Unsupported{fmt::format("attention_blind_rows' {} is not a tensor input of its group", role)};
  }

  const ir::Graph& group_;
  BlindRowsKernel kernel_;
};

}  // namespace

const char* blind_row_device_code() { return kBlindRowCode; }

bool has_blind_rows(const ir::Graph& group) {
  return std::any_of(group.nodes.begin(), group.nodes.end(),
                     [](const ir::Node& node) { return node.op == ir::kAttentionBlindRowsOp; });
}

std::variant<BlindRowsKernel, std::string> generate_blind_rows(const ir::Graph& group) {
  try {
    return Generator(group).run();
  } catch (const Unsupported& unsupported) {
    return unsupported.reason;
  }
}

std::vector<std::int64_t> pack_blind_rows_arguments(const BlindRowsKernel& kernel,
                                                    const std::vector<const DLTensor*>& operands) {
  const auto operand = [&](int position) -> const DLTensor& {
    return *operands.at(static_cast<std::size_t>(position));
  };
  const DLTensor& q = operand(kernel.query);
  std::int64_t scale_bits = 0;
  std::memcpy(&scale_bits, &kernel.scale, sizeof scale_bits);
  std::vector<std::int64_t> words{q.shape[0], q.shape[1], q.shape[2], operand(kernel.key_input).shape[2], scale_bits};
  for (int position : {kernel.attention, kernel.query, kernel.key_input, kernel.value, kernel.mask}) {
    pack_four_dimensional_operand(operand(position), words);
  }
  pack_four_dimensional_operand(*operands.back(), words);
  return words;
}

std::int64_t blind_rows_blocks(const std::vector<std::int64_t>& words) {
  constexpr std::int64_t kRowsPerBlock = kBlindRowsThreads / 32;
  return (words[0] * words[1] * words[2] + kRowsPerBlock - 1) / kRowsPerBlock;
}

}  // namespace zenith::cuda
