#include "backends/cuda/expression_rules.h"

#include <cmath>
#include <functional>

#include <fmt/format.h>

namespace zenith::cuda {
namespace {

// Arguments of one node as the rules see them.
class NodeView {
 public:
  NodeView(const ir::Graph& group, const ir::Node& node, const std::map<int, std::string>& names)
      : group_(group), node_(node), names_(names) {}

  std::string value(const std::string& arg) const { return names_.at(ref(arg)); }
  // The value as eager holds it: rounded to its own dtype. Expressions keep intermediates in float32,
  // which is harmless for smooth ops but flips discontinuous ones (comparisons, floor) at their
  // boundaries, so those read their operands this way.
  std::string exact(const std::string& arg) const;
  c10::ScalarType dtype_of(const std::string& arg) const { return group_.value(ref(arg)).type.dtype; }
  const ir::TensorType& type_of(const std::string& arg) const { return group_.value(ref(arg)).type; }
  c10::ScalarType result_dtype() const { return group_.value(node_.outputs.at(0)).type.dtype; }
  std::string scalar(const std::string& arg) const {
    const auto* a = node_.arg(arg);
    if (a != nullptr) {
      if (const auto* i = std::get_if<std::int64_t>(&a->value)) return float_literal(static_cast<double>(*i));
      if (const auto* d = std::get_if<double>(&a->value)) return float_literal(*d);
      if (const auto* b = std::get_if<bool>(&a->value)) return *b ? "1.0f" : "0.0f";
    }
    throw Unsupported{fmt::format("{}: argument '{}' is not a number", node_.qualified_name(), arg)};
  }
  // A tensor argument or a number, whichever the node holds.
  std::string operand(const std::string& arg) const {
    return is_tensor(arg) ? value(arg) : scalar(arg);
  }
  bool is_none(const std::string& arg) const {
    const auto* a = node_.arg(arg);
    return a == nullptr || std::holds_alternative<ir::NoneArg>(a->value);
  }
  std::string text(const std::string& arg) const {
    const auto* a = node_.arg(arg);
    const auto* s = a ? std::get_if<std::string>(&a->value) : nullptr;
    return s ? *s : "";
  }
  bool alpha_is_one() const { return is_none("alpha") || scalar("alpha") == float_literal(1.0); }
  std::string scaled(const std::string& operand) const {
    return alpha_is_one() ? operand : fmt::format("({} * {})", scalar("alpha"), operand);
  }
  bool is_tensor(const std::string& arg) const {
    const auto* a = node_.arg(arg);
    return a != nullptr && std::holds_alternative<ir::ValueRef>(a->value);
  }

 private:
  int ref(const std::string& arg) const {
    const auto* a = node_.arg(arg);
    const auto* r = a ? std::get_if<ir::ValueRef>(&a->value) : nullptr;
    if (r == nullptr) throw Unsupported{fmt::format("{}: argument '{}' is not a tensor", node_.qualified_name(), arg)};
    return r->id;
  }

  const ir::Graph& group_;
  const ir::Node& node_;
  const std::map<int, std::string>& names_;
};

using Rule = std::function<std::string(const NodeView&)>;

std::string pow_scalar(const NodeView& n) {
  auto e = n.scalar("exponent");
  auto a = n.value("self");
  if (e == float_literal(2)) return fmt::format("({0} * {0})", a);
  if (e == float_literal(3)) return fmt::format("({0} * {0} * {0})", a);
  if (e == float_literal(0.5)) return fmt::format("sqrtf({})", a);
  if (e == float_literal(-1)) return fmt::format("(1.f / {})", a);
  return fmt::format("powf({}, {})", a, e);
}

std::string NodeView::exact(const std::string& arg) const { return rounded(value(arg), dtype_of(arg)); }

bool is_reduced_float(c10::ScalarType dtype) {
  return dtype == c10::ScalarType::Half || dtype == c10::ScalarType::BFloat16;
}

// The dtype ATen compares two tensors in: a 0-d tensor does not widen a floating tensor of another
// rank; otherwise the wider floating type wins, and a bool operand takes the other's type.
c10::ScalarType comparison_dtype(const ir::TensorType& a, const ir::TensorType& b) {
  if (a.dtype == b.dtype) return a.dtype;
  if (a.dtype == c10::ScalarType::Bool) return b.dtype;
  if (b.dtype == c10::ScalarType::Bool) return a.dtype;
  if (a.rank() == 0 && b.rank() > 0) return b.dtype;
  if (b.rank() == 0 && a.rank() > 0) return a.dtype;
  return c10::promoteTypes(a.dtype, b.dtype);
}

Rule comparison(const char* op) {
  return [op](const NodeView& n) {
    auto self = n.exact("self");
    std::string other;
    if (n.is_tensor("other")) {
      auto common = comparison_dtype(n.type_of("self"), n.type_of("other"));
      self = rounded(self, common);
      other = rounded(n.exact("other"), common);
    } else {
      // A constant meets a reduced-precision tensor converted to its dtype; a bool or float32
      // tensor is compared in float32 (bool promotes to the constant's type), where it is exact.
      other = is_reduced_float(n.dtype_of("self")) ? rounded(n.scalar("other"), n.dtype_of("self")) : n.scalar("other");
    }
    return fmt::format("({} {} {} ? 1.f : 0.f)", self, op, other);
  };
}

// ATen's lerp: two forms, so that weight 1 gives `end` exactly.
std::string lerp(const NodeView& n) {
  auto s = n.value("self"), e = n.value("end"), w = n.operand("weight");
  return fmt::format("(fabsf({2}) < 0.5f ? {0} + {2} * ({1} - {0}) : {1} - ({1} - {0}) * (1.f - {2}))", s, e, w);
}

// Expressions in float; helpers (zn_*) keep PyTorch's NaN propagation where CUDA's fmaxf would not.
const std::map<std::string, Rule>& rules() {
  static const std::map<std::string, Rule> table = {
      {"aten::add.Tensor", [](const NodeView& n) { return fmt::format("({} + {})", n.value("self"), n.scaled(n.value("other"))); }},
      {"aten::sub.Tensor", [](const NodeView& n) { return fmt::format("({} - {})", n.value("self"), n.scaled(n.value("other"))); }},
      {"aten::rsub.Tensor", [](const NodeView& n) { return fmt::format("({} - {})", n.value("other"), n.scaled(n.value("self"))); }},
      {"aten::mul.Tensor", [](const NodeView& n) { return fmt::format("({} * {})", n.value("self"), n.value("other")); }},
      {"aten::div.Tensor", [](const NodeView& n) { return fmt::format("({} / {})", n.value("self"), n.value("other")); }},
      {"aten::add.Scalar", [](const NodeView& n) { return fmt::format("({} + {})", n.value("self"), n.scaled(n.scalar("other"))); }},
      {"aten::sub.Scalar", [](const NodeView& n) { return fmt::format("({} - {})", n.value("self"), n.scaled(n.scalar("other"))); }},
      {"aten::rsub.Scalar", [](const NodeView& n) { return fmt::format("({} - {})", n.scalar("other"), n.scaled(n.value("self"))); }},
      {"aten::mul.Scalar", [](const NodeView& n) { return fmt::format("({} * {})", n.value("self"), n.scalar("other")); }},
      {"aten::div.Scalar", [](const NodeView& n) { return fmt::format("({} / {})", n.value("self"), n.scalar("other")); }},
      {"aten::neg", [](const NodeView& n) { return fmt::format("(-{})", n.value("self")); }},
      {"aten::abs", [](const NodeView& n) { return fmt::format("fabsf({})", n.value("self")); }},
      {"aten::exp", [](const NodeView& n) { return fmt::format("expf({})", n.value("self")); }},
      {"aten::expm1", [](const NodeView& n) { return fmt::format("expm1f({})", n.value("self")); }},
      {"aten::log", [](const NodeView& n) { return fmt::format("logf({})", n.value("self")); }},
      {"aten::log1p", [](const NodeView& n) { return fmt::format("log1pf({})", n.value("self")); }},
      {"aten::sqrt", [](const NodeView& n) { return fmt::format("sqrtf({})", n.value("self")); }},
      {"aten::rsqrt", [](const NodeView& n) { return fmt::format("rsqrtf({})", n.value("self")); }},
      {"aten::reciprocal", [](const NodeView& n) { return fmt::format("(1.f / {})", n.value("self")); }},
      {"aten::square", [](const NodeView& n) { return fmt::format("({0} * {0})", n.value("self")); }},
      {"aten::sin", [](const NodeView& n) { return fmt::format("sinf({})", n.value("self")); }},
      {"aten::cos", [](const NodeView& n) { return fmt::format("cosf({})", n.value("self")); }},
      {"aten::erf", [](const NodeView& n) { return fmt::format("erff({})", n.value("self")); }},
      {"aten::floor", [](const NodeView& n) { return fmt::format("floorf({})", n.exact("self")); }},
      {"aten::ceil", [](const NodeView& n) { return fmt::format("ceilf({})", n.exact("self")); }},
      {"aten::round", [](const NodeView& n) { return fmt::format("rintf({})", n.exact("self")); }},
      {"aten::tanh", [](const NodeView& n) { return fmt::format("tanhf({})", n.value("self")); }},
      {"aten::sigmoid", [](const NodeView& n) { return fmt::format("(1.f / (1.f + expf(-{})))", n.value("self")); }},
      {"aten::silu", [](const NodeView& n) { return fmt::format("({0} / (1.f + expf(-{0})))", n.value("self")); }},
      {"aten::mish", [](const NodeView& n) { return fmt::format("({0} * tanhf(log1pf(expf({0}))))", n.value("self")); }},
      {"aten::relu", [](const NodeView& n) { return fmt::format("zn_relu({})", n.value("self")); }},
      {"aten::relu6", [](const NodeView& n) { return fmt::format("zn_min(zn_relu({}), 6.f)", n.value("self")); }},
      {"aten::hardtanh",
       [](const NodeView& n) {
         return fmt::format("zn_min(zn_max({}, {}), {})", n.value("self"), n.scalar("min_val"), n.scalar("max_val"));
       }},
      {"aten::elu",
       [](const NodeView& n) {
         return fmt::format("({0} > 0.f ? {2} * {0} : {2} * {1} * expm1f({0} * {3}))", n.value("self"), n.scalar("alpha"),
                            n.scalar("scale"), n.scalar("input_scale"));
       }},
      {"aten::gelu",
       [](const NodeView& n) {
         auto a = n.value("self");
         if (n.text("approximate") == "tanh") {
           return fmt::format("(0.5f * {0} * (1.f + tanhf(0.7978845608f * ({0} + 0.044715f * {0} * {0} * {0}))))", a);
         }
         return fmt::format("(0.5f * {0} * (1.f + erff({0} * 0.7071067812f)))", a);
       }},
      {"aten::leaky_relu",
       [](const NodeView& n) { return fmt::format("({0} > 0.f ? {0} : {0} * {1})", n.value("self"), n.scalar("negative_slope")); }},
      {"aten::hardswish",
       [](const NodeView& n) { return fmt::format("({0} * zn_min(zn_max({0} + 3.f, 0.f), 6.f) / 6.f)", n.value("self")); }},
      {"aten::hardsigmoid",
       [](const NodeView& n) { return fmt::format("(zn_min(zn_max({0} + 3.f, 0.f), 6.f) / 6.f)", n.value("self")); }},
      {"aten::softplus",
       [](const NodeView& n) {
         return fmt::format("({0} * {1} > {2} ? {0} : log1pf(expf({0} * {1})) / {1})", n.value("self"), n.scalar("beta"),
                            n.scalar("threshold"));
       }},
      {"aten::pow.Tensor_Scalar", pow_scalar},
      {"aten::pow.Tensor_Tensor", [](const NodeView& n) { return fmt::format("powf({}, {})", n.value("self"), n.value("exponent")); }},
      {"aten::maximum", [](const NodeView& n) { return fmt::format("zn_max({}, {})", n.value("self"), n.value("other")); }},
      {"aten::minimum", [](const NodeView& n) { return fmt::format("zn_min({}, {})", n.value("self"), n.value("other")); }},
      {"aten::clamp_min", [](const NodeView& n) { return fmt::format("zn_max({}, {})", n.value("self"), n.scalar("min")); }},
      {"aten::clamp_max", [](const NodeView& n) { return fmt::format("zn_min({}, {})", n.value("self"), n.scalar("max")); }},
      {"aten::clamp",
       [](const NodeView& n) {
         auto a = n.value("self");
         if (!n.is_none("min")) a = fmt::format("zn_max({}, {})", a, n.scalar("min"));
         if (!n.is_none("max")) a = fmt::format("zn_min({}, {})", a, n.scalar("max"));
         return a;
       }},
      {"aten::lerp.Scalar", lerp},
      {"aten::lerp.Tensor", lerp},
      {"aten::addcmul",
       [](const NodeView& n) {
         return fmt::format("({} + {} * {} * {})", n.value("self"), n.scalar("value"), n.value("tensor1"), n.value("tensor2"));
       }},
      {"aten::addcdiv",
       [](const NodeView& n) {
         return fmt::format("({} + {} * ({} / {}))", n.value("self"), n.scalar("value"), n.value("tensor1"), n.value("tensor2"));
       }},
      {"aten::eq.Tensor", comparison("==")}, {"aten::eq.Scalar", comparison("==")},
      {"aten::ne.Tensor", comparison("!=")}, {"aten::ne.Scalar", comparison("!=")},
      {"aten::lt.Tensor", comparison("<")},  {"aten::lt.Scalar", comparison("<")},
      {"aten::le.Tensor", comparison("<=")}, {"aten::le.Scalar", comparison("<=")},
      {"aten::gt.Tensor", comparison(">")},  {"aten::gt.Scalar", comparison(">")},
      {"aten::ge.Tensor", comparison(">=")}, {"aten::ge.Scalar", comparison(">=")},
      {"aten::logical_not", [](const NodeView& n) { return fmt::format("({} == 0.f ? 1.f : 0.f)", n.value("self")); }},
      {"aten::logical_and",
       [](const NodeView& n) { return fmt::format("({} != 0.f && {} != 0.f ? 1.f : 0.f)", n.value("self"), n.value("other")); }},
      {"aten::logical_or",
       [](const NodeView& n) { return fmt::format("({} != 0.f || {} != 0.f ? 1.f : 0.f)", n.value("self"), n.value("other")); }},
      {"aten::where.self",
       [](const NodeView& n) { return fmt::format("({} != 0.f ? {} : {})", n.value("condition"), n.value("self"), n.value("other")); }},
      {"aten::masked_fill.Scalar",
       [](const NodeView& n) {
         return fmt::format("({} != 0.f ? {} : {})", n.value("mask"), rounded(n.scalar("value"), n.result_dtype()), n.value("self"));
       }},
      {"aten::masked_fill.Tensor",
       [](const NodeView& n) { return fmt::format("({} != 0.f ? {} : {})", n.value("mask"), n.value("value"), n.value("self")); }},
      {"aten::_to_copy", [](const NodeView& n) { return rounded(n.exact("self"), n.result_dtype()); }},
      {"aten::type_as", [](const NodeView& n) { return rounded(n.exact("self"), n.result_dtype()); }},
      {"aten::clone", [](const NodeView& n) { return n.value("self"); }},
      // The backward ops the derivative rules emit (passes/autodiff).
      {"aten::threshold_backward",
       [](const NodeView& n) {
         return fmt::format("({} <= {} ? 0.f : {})", n.exact("self"), n.scalar("threshold"), n.value("grad_output"));
       }},
      {"aten::tanh_backward",
       [](const NodeView& n) { return fmt::format("({0} * (1.f - {1} * {1}))", n.value("grad_output"), n.value("output")); }},
      {"aten::sigmoid_backward",
       [](const NodeView& n) { return fmt::format("({0} * {1} * (1.f - {1}))", n.value("grad_output"), n.value("output")); }},
      {"aten::silu_backward",
       [](const NodeView& n) {
         return fmt::format("({0} * (1.f / (1.f + expf(-{1}))) * (1.f + {1} * (1.f - 1.f / (1.f + expf(-{1})))))",
                            n.value("grad_output"), n.value("self"));
       }},
      {"aten::gelu_backward",
       [](const NodeView& n) {
         auto g = n.value("grad_output"), x = n.value("self");
         if (n.text("approximate") == "tanh") {
           return fmt::format(
               "({0} * (0.5f * (1.f + tanhf(0.7978845608f * ({1} + 0.044715f * {1} * {1} * {1}))) + 0.5f * {1} * "
               "(1.f - tanhf(0.7978845608f * ({1} + 0.044715f * {1} * {1} * {1})) * tanhf(0.7978845608f * ({1} + "
               "0.044715f * {1} * {1} * {1}))) * 0.7978845608f * (1.f + 0.134145f * {1} * {1})))",
               g, x);
         }
         return fmt::format("({0} * (0.5f * (1.f + erff({1} * 0.7071067812f)) + {1} * 0.3989422804f * expf(-0.5f * {1} * {1})))",
                            g, x);
       }},
      {"aten::native_dropout_backward",
       [](const NodeView& n) { return fmt::format("({} * {} * {})", n.value("grad_output"), n.value("mask"), n.scalar("scale")); }},
  };
  return table;
}

constexpr const char* kPrelude = R"(#include <cuda_fp16.h>
#include <cuda_bf16.h>
// Loads and stores convert to and from float32, in which every expression is evaluated.
__device__ __forceinline__ float zn_load(const float* p) { return *p; }
__device__ __forceinline__ float zn_load(const __half* p) { return __half2float(*p); }
__device__ __forceinline__ float zn_load(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ float zn_load(const bool* p) { return *p ? 1.f : 0.f; }
__device__ __forceinline__ float zn_cvt(float v) { return v; }
__device__ __forceinline__ float zn_cvt(__half v) { return __half2float(v); }
__device__ __forceinline__ float zn_cvt(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float zn_cvt(bool v) { return v ? 1.f : 0.f; }
__device__ __forceinline__ void zn_store(float* p, float v) { *p = v; }
__device__ __forceinline__ void zn_store(__half* p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ void zn_store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }
__device__ __forceinline__ void zn_store(bool* p, float v) { *p = v != 0.f; }
__device__ __forceinline__ float zn_round_half(float v) { return __half2float(__float2half_rn(v)); }
__device__ __forceinline__ float zn_round_bf16(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }
// PyTorch propagates NaN through relu, clamp, maximum and minimum; fmaxf/fminf would drop it.
__device__ __forceinline__ float zn_relu(float a) { return (a > 0.f || a != a) ? a : 0.f; }
__device__ __forceinline__ float zn_max(float a, float b) { return (a != a || a > b) ? a : b; }
__device__ __forceinline__ float zn_min(float a, float b) { return (a != a || a < b) ? a : b; }
// The first statement of every generated kernel but the max pool's. Launched as a programmatic
// dependent launch (in a plan's CUDA graph: backends/cuda/programmatic_launch.h) the kernel may be
// resident before the kernel before it has finished; it waits here until that one has finished and
// its writes are visible (after a launch as usual there is nothing to wait for). Then it lets the
// kernel after it start: a programmatic dependent launch after it is dispatched while this one
// runs and waits for it in turn (the matrix-vector kernel loads its weight first). Waiting before
// letting the next one start keeps at most one kernel waiting ahead of the one that runs.
__device__ __forceinline__ void zn_follow_kernel_before() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
)";

}  // namespace

const char* storage_type(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::ScalarType::Float: return "float";
    case c10::ScalarType::Half: return "__half";
    case c10::ScalarType::BFloat16: return "__nv_bfloat16";
    case c10::ScalarType::Bool: return "bool";
    default: return nullptr;
  }
}

std::string float_literal(double v) {
  // Bit patterns: CUDA C++ has no literal for them (masked_fill(mask, -inf) before a softmax).
  const auto f = static_cast<float>(v);
  if (std::isnan(f)) return "__int_as_float(0x7fffffff)";
  if (std::isinf(f)) return f > 0 ? "__int_as_float(0x7f800000)" : "__int_as_float(0xff800000)";
  auto text = fmt::format("{:.9g}", f);
  if (text.find_first_of(".e") == std::string::npos) text += ".0";  // "1f" is not a float literal
  return text + "f";
}

const char* device_prelude() { return kPrelude; }

// `v`, rounded as a value of `dtype` would be (casts, and constants compared against a tensor of
// that dtype, which ATen converts to the tensor's dtype before comparing).
std::string rounded(const std::string& v, c10::ScalarType dtype) {
  switch (dtype) {
    case c10::ScalarType::Float: return v;
    case c10::ScalarType::Half: return fmt::format("zn_round_half({})", v);
    case c10::ScalarType::BFloat16: return fmt::format("zn_round_bf16({})", v);
    case c10::ScalarType::Bool: return fmt::format("({} != 0.f ? 1.f : 0.f)", v);
    default: throw Unsupported{fmt::format("a cast to {}", c10::toString(dtype))};
  }
}

bool has_expression_rule(const std::string& qualified_name) { return rules().count(qualified_name) > 0; }

std::string expression(const ir::Graph& group, const ir::Node& node, const std::map<int, std::string>& names) {
  auto it = rules().find(node.qualified_name());
  if (it == rules().end()) {
    throw Unsupported{fmt::format("{} is not an elementwise op the code generator knows", node.qualified_name())};
  }
  auto text = it->second(NodeView(group, node, names));
  // A bool result is 0 or 1 whatever the arithmetic gave (True + True is True).
  const auto result = group.value(node.outputs.at(0)).type.dtype;
  return result == c10::ScalarType::Bool ? rounded(text, result) : text;
}

std::uint64_t key_hash(const std::string& text) {
  std::uint64_t hash = 1469598103934665603ull;
  for (unsigned char c : text) hash = (hash ^ c) * 1099511628211ull;
  return hash;
}

}  // namespace zenith::cuda
