#include "backends/cuda/pool_codegen.h"

#include <algorithm>
#include <array>
#include <cstdint>

#include <ATen/native/Pool.h>
#include <fmt/format.h>

#include "backends/cuda/expression_rules.h"
#include "backends/cuda/operand_checks.h"
#include "core/node_arguments.h"

namespace zenith::cuda {
namespace {

// The kernel's body past its constants and types (T: the storage type; I: the index type; KH,
// KW, SH, SW, PH, PW, DH, DW: the window; VW: elements in 16 bytes; CHANNELS_INNER; THREADS).
// Arguments as pack_pool_arguments lays them out.
constexpr const char* kBody = R"(
// NVRTC has no math.h: negative infinity by its bits.
#define ZN_NEG_INF __int_as_float(0xff800000)

struct Args {
  long long n, c, h, w, oh, ow, vector;
  const void* x; long long xs[4];
  void* y; long long ys[4];
};

template <int V>
__device__ __forceinline__ void zn_load_n(const T* p, float* e) {
  if (V == 1) {
    e[0] = zn_load(p);
  } else {
    const uint4 raw = *reinterpret_cast<const uint4*>(p);
    const T* t = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int v = 0; v < V; ++v) e[v] = zn_load(t + v);
  }
}

template <int V>
__device__ __forceinline__ void zn_store_n(T* p, const float* e) {
  if (V == 1) {
    zn_store(p, e[0]);
  } else {
    uint4 raw;
    T* t = reinterpret_cast<T*>(&raw);
#pragma unroll
    for (int v = 0; v < V; ++v) zn_store(t + v, e[v]);
    *reinterpret_cast<uint4*>(p) = raw;
  }
}

// The largest value of one window for V consecutive channels from c; NaN wins, as in PyTorch.
template <int V>
__device__ __forceinline__ void zn_pool(const Args& p, I n, I c, I oy, I ox) {
  const T* x = reinterpret_cast<const T*>(p.x) + n * (I)p.xs[0] + c * (I)p.xs[1];
  float m[V];
#pragma unroll
  for (int v = 0; v < V; ++v) m[v] = ZN_NEG_INF;
  const I y0 = oy * SH - PH, x0 = ox * SW - PW;
#pragma unroll
  for (int i = 0; i < KH; ++i) {
    const I iy = y0 + i * DH;
    if (iy < 0 || iy >= (I)p.h) continue;
#pragma unroll
    for (int j = 0; j < KW; ++j) {
      const I ix = x0 + j * DW;
      if (ix < 0 || ix >= (I)p.w) continue;
      float e[V];
      zn_load_n<V>(x + iy * (I)p.xs[2] + ix * (I)p.xs[3], e);
#pragma unroll
      for (int v = 0; v < V; ++v) {
        if (e[v] > m[v] || e[v] != e[v]) m[v] = e[v];
      }
    }
  }
  T* y = reinterpret_cast<T*>(p.y) + n * (I)p.ys[0] + c * (I)p.ys[1] + oy * (I)p.ys[2] + ox * (I)p.ys[3];
  zn_store_n<V>(y, m);
}

extern "C" __global__ void __launch_bounds__(THREADS) NAME(const Args p) {
  const I step = (I)gridDim.x * THREADS;
  const I first = (I)blockIdx.x * THREADS + threadIdx.x;
  const I oh = (I)p.oh, ow = (I)p.ow, channels = (I)p.c;
#if CHANNELS_INNER
  if (p.vector) {
    const I groups = channels / VW, total = (I)p.n * oh * ow * groups;
    for (I i = first; i < total; i += step) {
      I t = i / groups;
      const I g = i - t * groups, ox = t % ow;
      t /= ow;
      zn_pool<VW>(p, t / oh, g * VW, t % oh, ox);
    }
    return;
  }
  const I total = (I)p.n * oh * ow * channels;
  for (I i = first; i < total; i += step) {
    I t = i / channels;
    const I c = i - t * channels, ox = t % ow;
    t /= ow;
    zn_pool<1>(p, t / oh, c, t % oh, ox);
  }
#else
  const I total = (I)p.n * channels * oh * ow;
  for (I i = first; i < total; i += step) {
    I t = i / ow;
    const I ox = i - t * ow, oy = t % oh;
    t /= oh;
    zn_pool<1>(p, t / channels, t % channels, oy, ox);
  }
#endif
}
)";

// A pair of window integers as max_pool2d takes them: one value stands for both, none for
// `fallback` (stride's default is the kernel size).
std::array<std::int64_t, 2> pair_arg(const ir::Node& node, const char* name, std::array<std::int64_t, 2> fallback) {
  const auto* arg = node.arg(name);
  if (arg == nullptr) return fallback;
  if (const auto* one = std::get_if<std::int64_t>(&arg->value)) return {*one, *one};
  const auto* list = std::get_if<std::vector<std::int64_t>>(&arg->value);
  if (list == nullptr) throw Unsupported{fmt::format("max_pool2d's {} is not a constant integer list", name)};
  if (list->empty()) return fallback;
  if (list->size() == 1) return {(*list)[0], (*list)[0]};
  if (list->size() == 2) return {(*list)[0], (*list)[1]};
  throw Unsupported{fmt::format("max_pool2d's {} has {} entries, 1 or 2 expected", name, list->size())};
}

class Generator {
 public:
  explicit Generator(const ir::Graph& group) : group_(group) {}

  PoolKernel run() {
    if (group_.nodes.size() != 1) throw Unsupported{"a max-pooling group holds one node"};
    check_group_shape(group_);
    const auto& node = group_.nodes.front();
    if (node.outputs.size() != 1) throw Unsupported{"max_pool2d with more than one result"};
    const int self = ir::tensor_arg(node, "self");
    if (self < 0 || group_.inputs.size() != 1 || group_.inputs.front() != self) {
      throw Unsupported{"max_pool2d whose input is not its group's one tensor input"};
    }
    kernel_.operands = {self, node.outputs.front()};
    for (int id : kernel_.operands) check_operand(group_, id);
    const auto& in = group_.value(self).type;
    const auto& out = group_.value(node.outputs.front()).type;
    if (in.rank() != 4 || out.rank() != 4) {
      throw Unsupported{fmt::format("max_pool2d over {}: a batched image [N, C, H, W] expected", in.to_string())};
    }
    if (out.dtype != in.dtype || in.dtype == c10::ScalarType::Bool || storage_type(in.dtype) == nullptr) {
      throw Unsupported{fmt::format("max_pool2d from {} to {}", c10::toString(in.dtype), c10::toString(out.dtype))};
    }
    const auto kernel = pair_arg(node, "kernel_size", {0, 0});
    const auto stride = pair_arg(node, "stride", kernel);
    const auto padding = pair_arg(node, "padding", {0, 0});
    const auto dilation = pair_arg(node, "dilation", {1, 1});
    const bool ceil_mode = ir::flag_arg(node, "ceil_mode");
    for (int d = 0; d < 2; ++d) {
      if (kernel[d] < 1 || stride[d] < 1 || dilation[d] < 1 || padding[d] < 0 || 2 * padding[d] > kernel[d]) {
        throw Unsupported{"max_pool2d with a window PyTorch would refuse"};
      }
      // PyTorch's own formula (without its checks: the window was checked above).
      const auto expected = at::native::pooling_output_shape_pad_lr<std::int64_t>(
          in.sizes[2 + d], kernel[d], padding[d], padding[d], stride[d], dilation[d], ceil_mode);
      if (out.sizes[2 + d] != expected) {
        throw Unsupported{fmt::format("max_pool2d's result {} where its window gives {} in dimension {}",
                                      out.to_string(), expected, 2 + d)};
      }
    }
    if (out.sizes[0] != in.sizes[0] || out.sizes[1] != in.sizes[1]) {
      throw Unsupported{fmt::format("max_pool2d from {} to {}: batch and channels kept expected", in.to_string(),
                                    out.to_string())};
    }
    const char* type = storage_type(in.dtype);
    kernel_.channels_innermost = out.sizes[1] > 1 && out.strides[1] == 1;
    kernel_.vector_width = static_cast<int>(16 / c10::elementSize(in.dtype));
    kernel_.index64 = needs_64bit_offsets(group_, kernel_.operands, in.sizes);
    kernel_.key = fmt::format("max pool v{} | {} | window {}x{} stride {}x{} padding {}x{} dilation {}x{} | {} | {}",
                              kPoolCodegenVersion, type, kernel[0], kernel[1], stride[0], stride[1], padding[0],
                              padding[1], dilation[0], dilation[1],
                              kernel_.channels_innermost ? "channels inner" : "width inner",
                              kernel_.index64 ? "64-bit" : "32-bit");
    kernel_.name = fmt::format("zenith_pool_{:016x}", key_hash(kernel_.key));
    kernel_.source = fmt::format(
        "{}\n// {}\ntypedef {} T;\ntypedef {} I;\n#define NAME {}\n#define KH {}\n#define KW {}\n#define SH {}\n"
        "#define SW {}\n#define PH {}\n#define PW {}\n#define DH {}\n#define DW {}\n#define VW {}\n"
        "#define CHANNELS_INNER {}\n#define THREADS {}\n{}",
        device_prelude(), kernel_.key, type, kernel_.index64 ? "long long" : "int", kernel_.name, kernel[0], kernel[1],
        stride[0], stride[1], padding[0], padding[1], dilation[0], dilation[1], kernel_.vector_width,
        kernel_.channels_innermost ? 1 : 0, kPoolThreads, kBody);
    return kernel_;
  }

 private:
  const ir::Graph& group_;
  PoolKernel kernel_;
};

// Whether `t`'s channels are innermost and every vector of `width` of them is one aligned load.
bool vector_ready(const DLTensor& t, int width) {
  const auto address = reinterpret_cast<std::uintptr_t>(static_cast<char*>(t.data) + t.byte_offset);
  if (address % 16 != 0 || t.shape[1] % width != 0 || t.strides[1] != 1) return false;
  for (int d : {0, 2, 3}) {
    if (t.shape[d] != 1 && t.strides[d] % width != 0) return false;
  }
  return true;
}

}  // namespace

bool has_max_pool(const ir::Graph& group) {
  return std::any_of(group.nodes.begin(), group.nodes.end(),
                     [](const ir::Node& node) { return node.op == "aten::max_pool2d"; });
}

std::variant<PoolKernel, std::string> generate_max_pool(const ir::Graph& group) {
  try {
    return Generator(group).run();
  } catch (const Unsupported& unsupported) {
    return unsupported.reason;
  }
}

std::vector<std::int64_t> pack_pool_arguments(const PoolKernel& kernel, const std::vector<const DLTensor*>& operands) {
  const DLTensor& in = *operands.at(0);
  const DLTensor& out = *operands.at(1);
  const bool vector = kernel.channels_innermost && vector_ready(in, kernel.vector_width) &&
                      vector_ready(out, kernel.vector_width);
  std::vector<std::int64_t> words{in.shape[0], in.shape[1], in.shape[2], in.shape[3], out.shape[2], out.shape[3],
                                  vector ? 1 : 0};
  pack_four_dimensional_operand(in, words);
  pack_four_dimensional_operand(out, words);
  return words;
}

std::int64_t pool_work_items(const PoolKernel& kernel, const std::vector<std::int64_t>& words) {
  const std::int64_t outputs = words[0] * words[1] * words[4] * words[5];
  return words[6] != 0 ? outputs / kernel.vector_width : outputs;
}

}  // namespace zenith::cuda
