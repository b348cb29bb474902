#include "core/op_registry.h"

#include <unordered_map>

namespace zenith::ir {
namespace {

struct Entry {
  const char* name;
  OpCategory category;
  bool random;
};

using C = OpCategory;

// Base names without namespace or trailing underscore: in-place variants share the entry.
const Entry kEntries[] = {
    // Elementwise arithmetic, comparison, activation and cast.
    {"add", C::Elementwise, false}, {"sub", C::Elementwise, false}, {"rsub", C::Elementwise, false},
    {"mul", C::Elementwise, false}, {"div", C::Elementwise, false}, {"neg", C::Elementwise, false},
    {"abs", C::Elementwise, false}, {"pow", C::Elementwise, false}, {"sqrt", C::Elementwise, false},
    {"rsqrt", C::Elementwise, false}, {"exp", C::Elementwise, false}, {"log", C::Elementwise, false},
    {"log1p", C::Elementwise, false}, {"expm1", C::Elementwise, false}, {"reciprocal", C::Elementwise, false},
    {"square", C::Elementwise, false}, {"sin", C::Elementwise, false}, {"cos", C::Elementwise, false},
    {"erf", C::Elementwise, false}, {"floor", C::Elementwise, false}, {"ceil", C::Elementwise, false},
    {"round", C::Elementwise, false}, {"sign", C::Elementwise, false}, {"maximum", C::Elementwise, false},
    {"minimum", C::Elementwise, false}, {"clamp", C::Elementwise, false}, {"clamp_min", C::Elementwise, false},
    {"clamp_max", C::Elementwise, false}, {"where", C::Elementwise, false}, {"masked_fill", C::Elementwise, false},
    {"relu", C::Elementwise, false}, {"relu6", C::Elementwise, false}, {"gelu", C::Elementwise, false},
    {"silu", C::Elementwise, false}, {"sigmoid", C::Elementwise, false}, {"tanh", C::Elementwise, false},
    {"softplus", C::Elementwise, false}, {"leaky_relu", C::Elementwise, false}, {"elu", C::Elementwise, false},
    {"hardswish", C::Elementwise, false}, {"hardsigmoid", C::Elementwise, false}, {"hardtanh", C::Elementwise, false},
    {"mish", C::Elementwise, false}, {"eq", C::Elementwise, false}, {"ne", C::Elementwise, false},
    {"lt", C::Elementwise, false}, {"le", C::Elementwise, false}, {"gt", C::Elementwise, false},
    {"ge", C::Elementwise, false}, {"logical_not", C::Elementwise, false}, {"logical_and", C::Elementwise, false},
    {"logical_or", C::Elementwise, false}, {"bitwise_not", C::Elementwise, false}, {"type_as", C::Elementwise, false},
    {"_to_copy", C::Elementwise, false}, {"fill", C::Elementwise, false}, {"zeros_like", C::Elementwise, false},
    {"ones_like", C::Elementwise, false}, {"full_like", C::Elementwise, false}, {"clone", C::Elementwise, false},
    {"copy", C::Elementwise, false}, {"lerp", C::Elementwise, false}, {"addcmul", C::Elementwise, false},
    {"addcdiv", C::Elementwise, false},
    // Backward ops of elementwise functions, as the derivative rules emit them.
    {"threshold_backward", C::Elementwise, false}, {"tanh_backward", C::Elementwise, false},
    {"sigmoid_backward", C::Elementwise, false}, {"silu_backward", C::Elementwise, false},
    {"gelu_backward", C::Elementwise, false}, {"native_dropout_backward", C::Elementwise, false},
    // Random elementwise.
    {"dropout", C::Elementwise, true}, {"native_dropout", C::Elementwise, true},
    {"feature_dropout", C::Elementwise, true}, {"alpha_dropout", C::Elementwise, true},
    {"bernoulli", C::Elementwise, true}, {"rand_like", C::Elementwise, true}, {"randn_like", C::Elementwise, true},
    {"rand", C::Other, true}, {"randn", C::Other, true}, {"randint", C::Other, true}, {"normal", C::Other, true},
    {"uniform", C::Elementwise, true}, {"multinomial", C::Other, true}, {"randperm", C::Other, true},
    // Reductions and normalizations.
    {"sum", C::Reduction, false}, {"mean", C::Reduction, false}, {"amax", C::Reduction, false},
    {"amin", C::Reduction, false}, {"max", C::Reduction, false}, {"min", C::Reduction, false},
    {"var", C::Reduction, false}, {"std", C::Reduction, false}, {"var_mean", C::Reduction, false},
    {"prod", C::Reduction, false}, {"norm", C::Reduction, false}, {"logsumexp", C::Reduction, false},
    {"argmax", C::Reduction, false}, {"argmin", C::Reduction, false}, {"softmax", C::Reduction, false},
    {"_softmax", C::Reduction, false}, {"log_softmax", C::Reduction, false}, {"_log_softmax", C::Reduction, false},
    {"layer_norm", C::Reduction, false}, {"native_layer_norm", C::Reduction, false},
    {"rms_norm", C::Reduction, false}, {"group_norm", C::Reduction, false}, {"all", C::Reduction, false},
    {"any", C::Reduction, false},
    // Matrix products.
    {"mm", C::MatrixProduct, false}, {"addmm", C::MatrixProduct, false}, {"bmm", C::MatrixProduct, false},
    {"baddbmm", C::MatrixProduct, false}, {"matmul", C::MatrixProduct, false}, {"linear", C::MatrixProduct, false},
    {"mv", C::MatrixProduct, false}, {"dot", C::MatrixProduct, false}, {"einsum", C::MatrixProduct, false},
    // Views: schema-annotated aliases of their input.
    {"view", C::View, false}, {"reshape", C::View, false}, {"_reshape_alias", C::View, false},
    {"view_as", C::View, false}, {"reshape_as", C::View, false}, {"t", C::View, false},
    {"transpose", C::View, false}, {"permute", C::View, false}, {"unsqueeze", C::View, false},
    {"squeeze", C::View, false}, {"expand", C::View, false}, {"expand_as", C::View, false},
    {"slice", C::View, false}, {"select", C::View, false}, {"narrow", C::View, false},
    {"chunk", C::View, false}, {"split", C::View, false}, {"split_with_sizes", C::View, false},
    {"unbind", C::View, false}, {"flatten", C::View, false}, {"unflatten", C::View, false},
    {"contiguous", C::View, false}, {"alias", C::View, false}, {"detach", C::View, false},
    {"as_strided", C::View, false}, {"movedim", C::View, false}, {"diagonal", C::View, false},
    {"to", C::View, false}, {"numpy_T", C::View, false}, {"unfold", C::View, false},
    // Everything else the model zoo uses.
    {"embedding", C::Other, false}, {"cat", C::Other, false}, {"stack", C::Other, false},
    {"conv1d", C::Other, false}, {"conv2d", C::Other, false}, {"convolution", C::Other, false},
    {"_convolution", C::Other, false}, {"max_pool2d", C::Other, false}, {"max_pool2d_with_indices", C::Other, false},
    {"avg_pool2d", C::Other, false}, {"adaptive_avg_pool2d", C::Other, false},
    {"_adaptive_avg_pool2d", C::Other, false}, {"batch_norm", C::Other, false},
    {"_batch_norm_impl_index", C::Other, false}, {"native_batch_norm", C::Other, false},
    {"_native_batch_norm_legit_no_training", C::Other, false}, {"arange", C::Other, false},
    {"ones", C::Other, false}, {"zeros", C::Other, false}, {"full", C::Other, false}, {"empty", C::Other, false},
    {"scalar_tensor", C::Other, false}, {"tensor", C::Other, false}, {"index_select", C::Other, false},
    {"gather", C::Other, false}, {"index", C::Other, false}, {"index_put", C::Other, false},
    {"scatter", C::Other, false}, {"repeat", C::Other, false}, {"repeat_interleave", C::Other, false},
    {"cumsum", C::Other, false}, {"triu", C::Other, false}, {"tril", C::Other, false}, {"topk", C::Other, false},
    {"sort", C::Other, false}, {"outer", C::Other, false}, {"scaled_dot_product_attention", C::Other, true},
    {"masked_select", C::Other, false}, {"nonzero", C::Other, false}, {"one_hot", C::Other, false},
    {"cross_entropy_loss", C::Other, false}, {"nll_loss", C::Other, false}, {"nll_loss_nd", C::Other, false},
    {"mse_loss", C::Other, false}, {"flip", C::Other, false}, {"roll", C::Other, false}, {"pad", C::Other, false},
    {"constant_pad_nd", C::Other, false}, {"upsample_nearest2d", C::Other, false},
    // The fused attention kernels (random: with dropout_p > 0 they draw their own dropout masks).
    {"_scaled_dot_product_efficient_attention", C::Other, true},
    {"_scaled_dot_product_cudnn_attention", C::Other, true},
    {"_scaled_dot_product_flash_attention", C::Other, true},
};

const std::unordered_map<std::string, const Entry*>& table() {
  static const auto* map = [] {
    auto* m = new std::unordered_map<std::string, const Entry*>();
    for (const auto& entry : kEntries) (*m)[entry.name] = &entry;
    return m;
  }();
  return *map;
}

// "aten::add_.Tensor" -> "add".
std::string base_name(const std::string& op) {
  std::string name = op;
  if (auto colon = name.rfind("::"); colon != std::string::npos) name = name.substr(colon + 2);
  if (auto dot = name.find('.'); dot != std::string::npos) name = name.substr(0, dot);
  if (name.size() > 1 && name.back() == '_' && name[name.size() - 2] != '_') name.pop_back();
  return name;
}

}  // namespace

const char* category_name(OpCategory category) {
  switch (category) {
    case OpCategory::Elementwise: return "elementwise";
    case OpCategory::Reduction: return "reduction";
    case OpCategory::MatrixProduct: return "matrix_product";
    case OpCategory::View: return "view";
    case OpCategory::Other: return "other";
  }
  return "other";
}

OpInfo op_info(const std::string& op) {
  if (op.rfind("aten::", 0) != 0) return {};
  auto it = table().find(base_name(op));
  if (it == table().end()) return {};
  return OpInfo{it->second->category, it->second->random, true};
}

std::vector<std::string> registered_ops() {
  std::vector<std::string> names;
  for (const auto& entry : kEntries) names.push_back(std::string("aten::") + entry.name);
  return names;
}

}  // namespace zenith::ir
