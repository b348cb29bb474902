#include "backends/cuda/attention_codegen.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "backends/cuda/blind_rows_codegen.h"
#include "backends/cuda/expression_rules.h"
#include "backends/cuda/operand_checks.h"
#include "core/attention_blind_rows.h"
#include "core/node_arguments.h"

namespace zenith::cuda {
namespace {

// The fusion pass groups attention with its blind rows up to the rows and heads this kernel takes.
static_assert(kAttentionMaxRows == ir::kAttentionWithBlindRowsMaxRows);
static_assert(kAttentionMaxHeadDim == ir::kAttentionWithBlindRowsMaxHeadDim);

// 16-byte loads of a key, and of values, a lane issues ahead: eight each, 64 registers. A
// 64-wide float16 head's key (eight vectors) and a lane's eight values of its warp's 32 keys are
// then all loaded ahead.
constexpr std::int64_t kLoadBatch = 8;

// The kernel's body past its constants and types (T: the storage type of query, key, value and
// output; M: the mask's; D, VEC = 16 bytes of T, CH = D / VEC, ROWS, THREADS; HAS_MASK,
// BOOL_MASK; BATCH: 16-byte loads a lane issues ahead, a power of two; BLIND: the group's blind
// rows computed here, with LIMIT and blind_row_device_code before the body). Arguments as
// pack_attention_arguments lays them out.
constexpr const char* kBody = R"(
// NVRTC has no math.h: negative infinity by its bits.
#define ZN_NEG_INF __int_as_float(0xff800000)

struct Args {
  long long batch, heads, rows, keys, row_chunks;
  double scale;
  const void* q; long long qs[4];
  const void* k; long long ks[4];
  const void* v; long long vs[4];
  const void* mask; long long ms[4];
  void* out; long long os[4];
};

// Whether every row of a head's keys or values (`head`: its first element; `s`: the operand's
// strides in elements over [B, H, S, D]) starts on a 16-byte boundary with its D elements
// adjacent: then a row is CH aligned 16-byte vectors. Decided once a block, so that the loads
// below are straight-line code: with a branch per 16-byte load (v2), a thread's eight loads of a
// key were issued one after another, each waiting for the one before it (ncu on the H200, the
// decode step: 32 blocks of 256 threads, half the issue slots waiting on global loads).
__device__ __forceinline__ bool zn_vector_rows(const void* head, const long long (&s)[4]) {
  return s[3] == 1 && s[2] % VEC == 0 && (reinterpret_cast<unsigned long long>(head) & 15ull) == 0;
}

// Element `i` of a 16-byte vector of T, as float.
__device__ __forceinline__ float zn_lane(const uint4& raw, int i) { return zn_cvt(reinterpret_cast<const T*>(&raw)[i]); }

__device__ __forceinline__ float zn_warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ __forceinline__ float zn_warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

extern "C" __global__ void __launch_bounds__(THREADS) NAME(const Args p) {
  zn_follow_kernel_before();
  constexpr float kLog2e = 1.4426950408889634f;
  constexpr int WARPS = THREADS / 32;
  constexpr int GPW = 32 / CH;  // lane groups of a warp, CH lanes each: one 16-byte slice a lane
  constexpr int KPL = CH;       // keys of the warp's 32 each lane weighs: grp, grp + GPW, ...
  constexpr int KB = CH < BATCH ? CH : BATCH;    // key vectors loaded ahead
  constexpr int VB = KPL < BATCH ? KPL : BATCH;  // value vectors loaded ahead
  __shared__ float q_s[ROWS][D];  // the block's queries times scale * log2(e)
  __shared__ float m_s[WARPS][ROWS], l_s[WARPS][ROWS];
  __shared__ float acc_s[WARPS][ROWS][D];
#if BLIND
  __shared__ float top_s[WARPS][ROWS];
#endif

  const long long chunk = blockIdx.x % p.row_chunks, bh = blockIdx.x / p.row_chunks;
  const long long h = bh % p.heads, b = bh / p.heads;
  const long long r0 = chunk * ROWS;
  const int rows = (int)min((long long)ROWS, p.rows - r0);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int slice = lane % CH, grp = lane / CH;
  const T* q = reinterpret_cast<const T*>(p.q) + b * p.qs[0] + h * p.qs[1] + r0 * p.qs[2];
  const T* k = reinterpret_cast<const T*>(p.k) + b * p.ks[0] + h * p.ks[1];
  const T* v = reinterpret_cast<const T*>(p.v) + b * p.vs[0] + h * p.vs[1];
#if HAS_MASK
  const M* mask = reinterpret_cast<const M*>(p.mask) + b * p.ms[0] + h * p.ms[1] + r0 * p.ms[2];
#endif
  const bool k_vectors = zn_vector_rows(k, p.ks), v_vectors = zn_vector_rows(v, p.vs);

  // Each warp takes 32 keys of a pass of THREADS keys, lane l scoring key l of them; the warp
  // keeps its own running maximum, sum and weighted values (the online softmax of
  // FlashAttention), and the warps meet once, at the end. What a pass reads (the lane's key, its
  // mask entries, the values it weighs) is loaded ahead, before anything waits: for the first
  // pass, before the queries are in shared memory, so that a decode step's kernel makes one trip
  // to memory.
  float m[ROWS], l[ROWS], acc[ROWS][VEC];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    m[r] = ZN_NEG_INF;
    l[r] = 0.f;
#pragma unroll
    for (int e = 0; e < VEC; ++e) acc[r][e] = 0.f;
  }
  uint4 kraw[KB], vraw[VB];
#if HAS_MASK && BOOL_MASK
  bool dropped[ROWS];
#elif HAS_MASK
  float add[ROWS];
#endif
#if BLIND
  // The largest mask entry the lane has read for each row: a row whose largest is below LIMIT is
  // blind (core/attention_blind_rows.h), computed again as written at the end.
  float mask_top[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) mask_top[r] = ZN_NEG_INF;
#endif
  // The loads ahead for the pass starting at key j0.
  auto load_ahead = [&](long long j0) {
    const long long jw = j0 + warp * 32, j = jw + lane;
    if (k_vectors && j < p.keys) {
#pragma unroll
      for (int c = 0; c < KB; ++c) kraw[c] = *reinterpret_cast<const uint4*>(k + j * p.ks[2] + c * VEC);
    }
    if (v_vectors) {
#pragma unroll
      for (int u = 0; u < VB; ++u) {
        const long long jv = jw + grp + u * GPW;
        if (jv < p.keys) vraw[u] = *reinterpret_cast<const uint4*>(v + jv * p.vs[2] + slice * VEC);
      }
    }
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
#if HAS_MASK && BOOL_MASK
      dropped[r] = j < p.keys && r < rows && !mask[r * p.ms[2] + j * p.ms[3]];
#elif BLIND
      const float entry = j < p.keys && r < rows ? zn_load(mask + r * p.ms[2] + j * p.ms[3]) : ZN_NEG_INF;
      mask_top[r] = fmaxf(mask_top[r], entry);
      add[r] = j < p.keys && r < rows ? entry * kLog2e : 0.f;
#elif HAS_MASK
      add[r] = j < p.keys && r < rows ? zn_load(mask + r * p.ms[2] + j * p.ms[3]) * kLog2e : 0.f;
#endif
    }
  };
  load_ahead(0);
  const float scale = (float)p.scale * kLog2e;
  for (int i = threadIdx.x; i < ROWS * D; i += THREADS) {
    const int r = i / D, d = i % D;
    q_s[r][d] = r < rows ? zn_load(q + r * p.qs[2] + d * p.qs[3]) * scale : 0.f;
  }
  __syncthreads();

  for (long long j0 = 0; j0 < p.keys; j0 += THREADS) {
    const long long jw = j0 + warp * 32, j = jw + lane;
    // The lane's scores, in log2 units.
    float s[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) s[r] = 0.f;
    if (j < p.keys) {
      const T* kj = k + j * p.ks[2];
      if (k_vectors) {
        // KB vectors of the key, from vector c0 on, times every row's query: element e of every
        // vector before element e + 1 of any, so that no load is put off until an earlier one
        // has been used.
        auto score = [&](const uint4 (&raw)[KB], int c0) {
#pragma unroll
          for (int e = 0; e < VEC; ++e)
#pragma unroll
            for (int c = 0; c < KB; ++c) {
              const float x = zn_lane(raw[c], e);
#pragma unroll
              for (int r = 0; r < ROWS; ++r) s[r] = fmaf(q_s[r][(c0 + c) * VEC + e], x, s[r]);
            }
        };
        score(kraw, 0);
#pragma unroll
        for (int c0 = KB; c0 < CH; c0 += KB) {  // a head wider than KB vectors: the rest now
          uint4 raw[KB];
#pragma unroll
          for (int c = 0; c < KB; ++c) raw[c] = *reinterpret_cast<const uint4*>(kj + (c0 + c) * VEC);
          score(raw, c0);
        }
      } else {
        // Strided or unaligned keys (rare): one load an element, a few in flight at a time.
#pragma unroll 8
        for (int d = 0; d < D; ++d) {
          const float x = zn_load(kj + d * p.ks[3]);
#pragma unroll
          for (int r = 0; r < ROWS; ++r) s[r] = fmaf(q_s[r][d], x, s[r]);
        }
      }
    }
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
#if HAS_MASK && BOOL_MASK
      if (dropped[r]) s[r] = ZN_NEG_INF;
#elif HAS_MASK
      s[r] += add[r];
#endif
      if (j >= p.keys) s[r] = ZN_NEG_INF;
    }
    // The warp's softmax step: its maximum raises the running one, and what was summed and
    // weighed so far is rescaled to it.
    float pr[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      const float next = fmaxf(m[r], zn_warp_max(s[r]));
      const float base = next == ZN_NEG_INF ? 0.f : next;  // every key so far masked: nothing to weigh
      pr[r] = exp2f(s[r] - base);
      const float rescale = exp2f(m[r] - base);
      l[r] = l[r] * rescale + zn_warp_sum(pr[r]);
      m[r] = next;
#pragma unroll
      for (int e = 0; e < VEC; ++e) acc[r][e] *= rescale;
    }
    // The values: lane (slice, grp) weighs keys grp, grp + GPW, ... of the warp's 32 with the
    // probabilities of the lanes that scored them, VB keys at a time: the first VB loaded ahead,
    // each further batch's loads issued before the first is used.
#pragma unroll
    for (int u0 = 0; u0 < KPL; u0 += VB) {
      uint4 raw[VB];
#pragma unroll
      for (int u = 0; u < VB; ++u) {
        const long long jv = jw + grp + (u0 + u) * GPW;
        if (u0 == 0) raw[u] = vraw[u];
        else if (v_vectors && jv < p.keys) raw[u] = *reinterpret_cast<const uint4*>(v + jv * p.vs[2] + slice * VEC);
      }
#pragma unroll
      for (int u = 0; u < VB; ++u) {
        const int key = grp + (u0 + u) * GPW;
        const long long jv = jw + key;
        float w[ROWS];
#pragma unroll
        for (int r = 0; r < ROWS; ++r) w[r] = __shfl_sync(0xffffffffu, pr[r], key);
        if (jv >= p.keys) continue;
        float x[VEC];
        if (v_vectors) {
#pragma unroll
          for (int e = 0; e < VEC; ++e) x[e] = zn_lane(raw[u], e);
        } else {
          const T* vj = v + jv * p.vs[2] + (long long)slice * VEC * p.vs[3];
#pragma unroll
          for (int e = 0; e < VEC; ++e) x[e] = zn_load(vj + e * p.vs[3]);
        }
#pragma unroll
        for (int r = 0; r < ROWS; ++r)
#pragma unroll
          for (int e = 0; e < VEC; ++e) acc[r][e] = fmaf(w[r], x[e], acc[r][e]);
      }
    }
    if (j0 + THREADS < p.keys) load_ahead(j0 + THREADS);
  }

  // The lanes of one slice (CH apart) sum their keys' shares; the warps meet in shared memory,
  // each weighed by how far its maximum lies below the block's.
#pragma unroll
  for (int o = CH; o < 32; o <<= 1)
#pragma unroll
    for (int r = 0; r < ROWS; ++r)
#pragma unroll
      for (int e = 0; e < VEC; ++e) acc[r][e] += __shfl_xor_sync(0xffffffffu, acc[r][e], o);
  if (lane < CH) {
#pragma unroll
    for (int r = 0; r < ROWS; ++r)
#pragma unroll
      for (int e = 0; e < VEC; ++e) acc_s[warp][r][slice * VEC + e] = acc[r][e];
  }
#if BLIND
#pragma unroll
  for (int r = 0; r < ROWS; ++r) mask_top[r] = zn_warp_max(mask_top[r]);
#endif
  if (lane == 0) {
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      m_s[warp][r] = m[r];
      l_s[warp][r] = l[r];
#if BLIND
      top_s[warp][r] = mask_top[r];
#endif
    }
  }
  __syncthreads();
  T* out = reinterpret_cast<T*>(p.out) + b * p.os[0] + h * p.os[1] + r0 * p.os[2];
#if BLIND
  // Whether row r's every key is hidden: the largest entry of its mask row below LIMIT.
  auto blind = [&](int r) {
    float top = ZN_NEG_INF;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) top = fmaxf(top, top_s[w][r]);
    return top < LIMIT;
  };
#endif
  for (int i = threadIdx.x; i < rows * D; i += THREADS) {
    const int r = i / D, d = i % D;
#if BLIND
    if (blind(r)) continue;  // written below, as the model wrote attention out
#endif
    float top = ZN_NEG_INF;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) top = fmaxf(top, m_s[w][r]);
    const float base = top == ZN_NEG_INF ? 0.f : top;
    float total = 0.f, sum = 0.f;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) {
      const float weight = exp2f(m_s[w][r] - base);
      total = fmaf(weight, acc_s[w][r][d], total);
      sum = fmaf(weight, l_s[w][r], sum);
    }
    // A row whose every key is masked (or no keys) has nothing to weigh: 0, as eager's
    // scaled_dot_product_attention gives it (its _safe_softmax), not 0 / 0.
    zn_store(out + r * p.os[2] + d * p.os[3], sum == 0.f ? 0.f : total / sum);
  }
#if BLIND
  // A blind row a warp, as the blind-rows kernel computes it (blind_rows_codegen.h).
  for (int r = warp; r < rows; r += WARPS) {
    if (!blind(r)) continue;
    const ZnBlindRow row{q + r * p.qs[2], p.qs[3], k, p.ks[2], p.ks[3], v, p.vs[2], p.vs[3],
                         mask + r * p.ms[2], p.ms[3], p.keys, (float)p.scale};
    zn_blind_row(row, out + r * p.os[2], p.os[3]);
  }
#endif
}
)";

// The group's attention node and its operand positions, or why the kernel cannot run it.
class Generator {
 public:
  explicit Generator(const ir::Graph& group) : group_(group) {}

  AttentionKernel run() {
    if (group_.nodes.empty() || group_.nodes.size() > 2 || group_.nodes.front().op != "aten::scaled_dot_product_attention") {
      throw Unsupported{"an attention group holds the attention node, and the blind rows after it or nothing"};
    }
    check_group_shape(group_);
    const auto& node = group_.nodes.front();
    if (node.outputs.size() != 1) throw Unsupported{"scaled_dot_product_attention with more than one result"};
    const ir::Node* blind = group_.nodes.size() == 2 ? &group_.nodes.back() : nullptr;
    if (ir::number_arg(node, "dropout_p").value_or(1.0) != 0.0) throw Unsupported{"attention with dropout"};
    if (ir::flag_arg(node, "is_causal")) throw Unsupported{"causal attention (is_causal=True)"};
    if (ir::flag_arg(node, "enable_gqa")) throw Unsupported{"attention with enable_gqa=True"};
    if (blind != nullptr) check_blind_rows(node, *blind);
    kernel_.operands = group_.inputs;
    kernel_.operands.push_back((blind != nullptr ? blind : &node)->outputs.front());
    for (int id : kernel_.operands) check_operand(group_, id);
    kernel_.query = position(ir::tensor_arg(node, "query"), "query");
    kernel_.key_input = position(ir::tensor_arg(node, "key"), "key");
    kernel_.value = position(ir::tensor_arg(node, "value"), "value");
    const int mask = ir::tensor_arg(node, "attn_mask");
    if (mask >= 0) kernel_.mask = position(mask, "attn_mask");
    else if (const auto* arg = node.arg("attn_mask"); arg == nullptr || !std::holds_alternative<ir::NoneArg>(arg->value))
      throw Unsupported{"an attention mask that is not a tensor"};

    const auto& q = group_.value(ir::tensor_arg(node, "query")).type;
    const auto& k = group_.value(ir::tensor_arg(node, "key")).type;
    const auto& v = group_.value(ir::tensor_arg(node, "value")).type;
    const auto& out = group_.value(node.outputs.front()).type;
    if (q.rank() != 4 || k.rank() != 4 || v.rank() != 4) throw Unsupported{"attention over operands not of rank 4"};
    if (k.dtype != q.dtype || v.dtype != q.dtype || out.dtype != q.dtype) {
      throw Unsupported{"query, key, value and result of different dtypes"};
    }
    const char* type = storage_type(q.dtype);
    if (type == nullptr || q.dtype == c10::ScalarType::Bool) {
      throw Unsupported{fmt::format("attention in {}", c10::toString(q.dtype))};
    }
    if (k.sizes[0] != q.sizes[0] || v.sizes[0] != q.sizes[0] || k.sizes[1] != q.sizes[1] || v.sizes[1] != q.sizes[1] ||
        v.sizes[2] != k.sizes[2] || k.sizes[3] != q.sizes[3] || v.sizes[3] != q.sizes[3]) {
      throw Unsupported{fmt::format("query {}, key {}, value {}: not one batch, head count and head dimension",
                                    q.to_string(), k.to_string(), v.to_string())};
    }
    if (q.sizes[2] > kAttentionMaxRows) {
      throw Unsupported{fmt::format("{} query rows per head, above the {} of a decode step: PyTorch's fused kernels "
                                    "serve prompts", q.sizes[2], kAttentionMaxRows)};
    }
    const std::int64_t d = q.sizes[3], element = static_cast<std::int64_t>(c10::elementSize(q.dtype));
    const std::int64_t vec = 16 / element;
    const std::int64_t slices = d / vec;
    if (d > kAttentionMaxHeadDim || d % vec != 0 || (slices & (slices - 1)) != 0) {
      throw Unsupported{fmt::format("head dimension {}: the kernel takes a power of two of 16-byte slices, at most {}",
                                    d, kAttentionMaxHeadDim)};
    }
    std::string mask_type = "none";
    if (kernel_.mask >= 0) {
      const auto& m = group_.value(mask).type;
      if (m.rank() > 4) throw Unsupported{"an attention mask of rank above 4"};
      mask_type = storage_type(m.dtype) ? storage_type(m.dtype) : "";
      if (mask_type.empty()) throw Unsupported{fmt::format("an attention mask of {}", c10::toString(m.dtype))};
    }
    const auto* scale = node.arg("scale");
    if (scale != nullptr && !std::holds_alternative<ir::NoneArg>(scale->value) && !ir::number_arg(node, "scale")) {
      throw Unsupported{"an attention scale that is not a number"};
    }
    kernel_.scale = ir::number_arg(node, "scale").value_or(1.0 / std::sqrt(static_cast<double>(d)));
    if (blind != nullptr) {
      if (mask_type != type) {
        throw Unsupported{fmt::format("blind rows over a mask of {} beside a query of {}: one dtype expected",
                                      mask_type, type)};
      }
      if (ir::number_arg(*blind, "scale") != kernel_.scale) {
        throw Unsupported{"blind rows scaled otherwise than the attention before them"};
      }
    }

    kernel_.key = fmt::format("attention v{} | {} | mask {} | D {}{}", kAttentionCodegenVersion, type, mask_type, d,
                              blind != nullptr ? " | blind rows" : "");
    kernel_.name = fmt::format("zenith_attn_{:016x}", key_hash(kernel_.key));
    std::string blind_code;
    if (blind != nullptr) {
      blind_code = fmt::format("#define DV D\n#define NV {}\n#define ROUND(x) {}\n#define LIMIT {}\n{}", (d + 31) / 32,
                               rounded("(x)", q.dtype), float_literal(ir::kBlindRowMaskLimit), blind_row_device_code());
    }
    kernel_.source = fmt::format(
        "{}\n// {}\ntypedef {} T;\ntypedef {} M;\n#define NAME {}\n#define D {}\n#define VEC {}\n#define CH {}\n"
        "#define ROWS {}\n#define THREADS {}\n#define HAS_MASK {}\n#define BOOL_MASK {}\n#define BATCH {}\n"
        "#define BLIND {}\n{}{}",
        device_prelude(), kernel_.key, type, mask_type == "none" ? "float" : mask_type, kernel_.name, d, vec, slices,
        kAttentionRowsPerBlock, kAttentionThreads, kernel_.mask >= 0 ? 1 : 0, mask_type == "bool" ? 1 : 0,
        std::min<std::int64_t>(slices, kLoadBatch), blind != nullptr ? 1 : 0, blind_code, kBody);
    return kernel_;
  }

 private:
  // The blind-rows node reads the attention's result and the attention's own operands, so that
  // the kernel computes both from them: what the fusion pass groups (passes/fusion.h).
  void check_blind_rows(const ir::Node& attention, const ir::Node& blind) const {
    if (blind.op != ir::kAttentionBlindRowsOp || blind.outputs.size() != 1 ||
        ir::tensor_arg(blind, "attention") != attention.outputs.front()) {
      throw Unsupported{fmt::format("{} after the attention, not its blind rows", blind.op)};
    }
    for (const char* role : {"query", "key", "value", "attn_mask"}) {
      if (ir::tensor_arg(blind, role) != ir::tensor_arg(attention, role)) {
        throw Unsupported{fmt::format("blind rows over another {} than the attention's", role)};
      }
    }
    if (ir::tensor_arg(attention, "attn_mask") < 0) throw Unsupported{"blind rows without a mask"};
    if (group_.outputs.size() != 1 || group_.outputs.front() != blind.outputs.front()) {
      throw Unsupported{"the attention's own result is read outside its group: the kernel writes the blind rows' alone"};
    }
  }

  // The operand position of group input `id`, which the node reads as `role`.
  int position(int id, const char* role) const {
    for (std::size_t i = 0; i < group_.inputs.size(); ++i) {
      if (group_.inputs[i] == id) return static_cast<int>(i);
    }
    throw Unsupported{fmt::format("the attention's {} is not an input of its group", role)};
  }

  const ir::Graph& group_;
  AttentionKernel kernel_;
};

}  // namespace

bool has_attention(const ir::Graph& group) {
  return std::any_of(group.nodes.begin(), group.nodes.end(),
                     [](const ir::Node& node) { return node.op == "aten::scaled_dot_product_attention"; });
}

std::variant<AttentionKernel, std::string> generate_attention(const ir::Graph& group) {
  try {
    return Generator(group).run();
  } catch (const Unsupported& unsupported) {
    return unsupported.reason;
  }
}

std::vector<std::int64_t> pack_attention_arguments(const AttentionKernel& kernel,
                                                   const std::vector<const DLTensor*>& operands) {
  const DLTensor& q = *operands.at(static_cast<std::size_t>(kernel.query));
  const DLTensor& k = *operands.at(static_cast<std::size_t>(kernel.key_input));
  const std::int64_t rows = q.shape[2];
  const std::int64_t chunks = (rows + kAttentionRowsPerBlock - 1) / kAttentionRowsPerBlock;
  std::int64_t scale_bits = 0;
  std::memcpy(&scale_bits, &kernel.scale, sizeof scale_bits);
  std::vector<std::int64_t> words{q.shape[0], q.shape[1], rows, k.shape[2], chunks, scale_bits};
  pack_four_dimensional_operand(q, words);
  pack_four_dimensional_operand(k, words);
  pack_four_dimensional_operand(*operands.at(static_cast<std::size_t>(kernel.value)), words);
  if (kernel.mask >= 0) {
    pack_four_dimensional_operand(*operands.at(static_cast<std::size_t>(kernel.mask)), words);
  } else {
    words.insert(words.end(), 5, 0);
  }
  pack_four_dimensional_operand(*operands.back(), words);
  return words;
}

std::int64_t attention_blocks(const std::vector<std::int64_t>& words) { return words[0] * words[1] * words[4]; }

}  // namespace zenith::cuda
