#include "backends/cuda/matmul_plan.h"

#include <algorithm>
#include <cstdint>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "backends/cuda/expression_rules.h"
#include "backends/cuda/matrix_geometry.h"

namespace zenith::cuda {
namespace {

const char* epilogue_name(MatmulEpilogue epilogue) {
  switch (epilogue) {
    case MatmulEpilogue::None: return "none";
    case MatmulEpilogue::Relu: return "relu";
    case MatmulEpilogue::GeluTanh: return "gelu-tanh";
  }
  return "?";
}

struct Refusal {
  std::string reason;
};

[[noreturn]] void refuse(std::string reason) { throw Refusal{std::move(reason)}; }


std::string type_text(const ir::TensorType& type) {
  return fmt::format("{} strides {}", shape_text(type.sizes), shape_text(type.strides));
}

int tensor_arg(const ir::Node& node, const std::string& name) {
  const auto* arg = node.arg(name);
  const auto* ref = arg ? std::get_if<ir::ValueRef>(&arg->value) : nullptr;
  if (ref == nullptr) refuse(fmt::format("{}: argument '{}' is not a tensor", node.qualified_name(), name));
  return ref->id;
}

bool is_none(const ir::Node& node, const std::string& name) {
  const auto* arg = node.arg(name);
  return arg == nullptr || std::holds_alternative<ir::NoneArg>(arg->value);
}

// A scalar argument that must be 1 (alpha, beta): absent means its schema default, 1.
void require_one(const ir::Node& node, const std::string& name, const std::string& why) {
  const auto* arg = node.arg(name);
  if (arg == nullptr) return;
  if (const auto* i = std::get_if<std::int64_t>(&arg->value); i && *i == 1) return;
  if (const auto* d = std::get_if<double>(&arg->value); d && *d == 1.0) return;
  refuse(fmt::format("{}: {}={} {}", node.qualified_name(), name, arg->to_string().substr(name.size() + 1), why));
}

class Planner {
 public:
  explicit Planner(const ir::Graph& group) : group_(group) {}

  MatmulProgram run() {
    check_group();
    read_product(group_.nodes.front());
    for (std::size_t i = 1; i < group_.nodes.size(); ++i) read_epilogue_node(group_.nodes[i]);
    if (current_ != group_.outputs.front()) {
      refuse(fmt::format("the group's output %{} is not the result of its last node", group_.outputs.front()));
    }
    check_types();
    check_shapes();
    check_layouts();
    program_.input_count = static_cast<int>(group_.inputs.size());
    program_.a_input = input_index(a_, "A");
    program_.b_input = input_index(b_, "B");
    if (bias_ >= 0) program_.bias_input = input_index(bias_, "the bias");
    program_.key = key();
    program_.name = fmt::format("zenith_cublaslt_{:016x}", key_hash(program_.key));
    return program_;
  }

 private:
  void check_group() const {
    if (group_.nodes.empty()) refuse("the group is empty");
    for (std::size_t i = 0; i + 1 < group_.nodes.size(); ++i) {
      for (int out : group_.outputs) {
        if (!group_.nodes[i].outputs.empty() && out == group_.nodes[i].outputs.front()) {
          refuse(fmt::format("the intermediate result %{} of {} is read outside the group (it is a group output); "
                             "only the last node's result can be",
                             out, group_.nodes[i].qualified_name()));
        }
      }
    }
    if (group_.outputs.size() != 1) {
      refuse(fmt::format("the group has {} outputs; a cuBLASLt matmul writes exactly one", group_.outputs.size()));
    }
    for (int alias : group_.output_aliases) {
      if (alias >= 0) refuse("the output is written in place into an input");
    }
  }

  void read_product(const ir::Node& node) {
    const auto op = node.qualified_name();
    program_.ops.push_back(op);
    if (node.outputs.size() != 1) refuse(fmt::format("{} has {} results", op, node.outputs.size()));
    if (op == "aten::mm" || op == "aten::bmm") {
      a_ = tensor_arg(node, "self");
      b_ = tensor_arg(node, "mat2");
    } else if (op == "aten::addmm") {
      a_ = tensor_arg(node, "mat1");
      b_ = tensor_arg(node, "mat2");
      bias_ = tensor_arg(node, "self");
      require_one(node, "beta", "scales the bias; the cuBLASLt bias epilogue adds it unscaled (beta=1 only)");
      require_one(node, "alpha", "scales the product; only alpha=1 is fused");
    } else if (op == "aten::matmul") {
      a_ = tensor_arg(node, "self");
      b_ = tensor_arg(node, "other");
    } else if (op == "aten::linear") {
      a_ = tensor_arg(node, "input");
      b_ = tensor_arg(node, "weight");
      program_.b_stored_transposed = true;
      if (!is_none(node, "bias")) bias_ = tensor_arg(node, "bias");
    } else {
      refuse(fmt::format("{} is not a matrix product run through cuBLASLt (aten::mm, aten::addmm, aten::bmm, "
                         "aten::matmul, aten::linear)",
                         op));
    }
    choose_leading_dims(op);
    current_ = node.outputs.front();
  }

  void choose_leading_dims(const std::string& op) {
    const auto& a = group_.value(a_).type;
    const auto& b = group_.value(b_).type;
    auto ranks = [&] { return fmt::format("{} @ {}", shape_text(a.sizes), shape_text(b.sizes)); };
    if (op == "aten::bmm") {
      if (a.rank() != 3 || b.rank() != 3) refuse(fmt::format("aten::bmm of {} is not 3-D @ 3-D", ranks()));
      program_.leading = LeadingDims::Batch;
    } else if (op == "aten::linear") {
      if (a.rank() < 1 || b.rank() != 2) refuse(fmt::format("aten::linear of input and weight {} needs a 2-D weight", ranks()));
      program_.leading = LeadingDims::FoldIntoRows;
    } else if (op == "aten::matmul") {
      if (a.rank() < 2 || b.rank() < 2) {
        refuse(fmt::format("aten::matmul {} has a 1-D operand (a matrix-vector product), which is not run here", ranks()));
      }
      if (b.rank() == 2) {
        program_.leading = LeadingDims::FoldIntoRows;
      } else if (a.rank() == b.rank() &&
                 std::equal(a.sizes.begin(), a.sizes.end() - 2, b.sizes.begin(), b.sizes.end() - 2)) {
        program_.leading = LeadingDims::Batch;
      } else {
        refuse(fmt::format("aten::matmul {} broadcasts batch dimensions; only identical batch dimensions (or a 2-D "
                           "right operand) run as one cuBLASLt call",
                           ranks()));
      }
    } else {  // mm, addmm
      if (a.rank() != 2 || b.rank() != 2) refuse(fmt::format("{} of {} is not 2-D @ 2-D", op, ranks()));
      program_.leading = LeadingDims::FoldIntoRows;
    }
  }

  // A node after the product: a bias add, then an activation, each reading the previous result.
  void read_epilogue_node(const ir::Node& node) {
    const auto op = node.qualified_name();
    program_.ops.push_back(op);
    if (node.outputs.size() != 1) refuse(fmt::format("{} has {} results", op, node.outputs.size()));
    for (int out : group_.outputs) {
      if (out == current_) {
        refuse(fmt::format("the intermediate result %{} is read outside the group (it is a group output); only the "
                           "last node's result can be",
                           current_));
      }
    }
    if (op == "aten::add.Tensor") {
      read_bias_add(node);
    } else if (op == "aten::relu" || op == "aten::gelu") {
      read_activation(node, op);
    } else {
      refuse(fmt::format("{} cannot follow the product as a cuBLASLt epilogue (only a [N] bias add, aten::relu and "
                         "aten::gelu with approximate='tanh' can)",
                         op));
    }
    current_ = node.outputs.front();
  }

  void read_bias_add(const ir::Node& node) {
    if (program_.epilogue != MatmulEpilogue::None) {
      refuse("aten::add.Tensor after the activation is not a cuBLASLt epilogue (the bias is added before it)");
    }
    if (bias_ >= 0) refuse("aten::add.Tensor adds a second bias; the product already has one");
    require_one(node, "alpha", "scales the added tensor; only alpha=1 is a bias epilogue");
    int self = tensor_arg(node, "self");
    int other = tensor_arg(node, "other");
    if (self == current_ && other == current_) refuse("aten::add.Tensor adds the product to itself, not a bias");
    if (self != current_ && other != current_) {
      refuse(fmt::format("aten::add.Tensor does not read the previous result %{}", current_));
    }
    bias_ = self == current_ ? other : self;
    bias_from_add_ = true;
  }

  void read_activation(const ir::Node& node, const std::string& op) {
    if (program_.epilogue != MatmulEpilogue::None) refuse(fmt::format("{} is a second activation", op));
    if (tensor_arg(node, "self") != current_) refuse(fmt::format("{} does not read the previous result %{}", op, current_));
    if (op == "aten::relu") {
      program_.epilogue = MatmulEpilogue::Relu;
      return;
    }
    const auto* arg = node.arg("approximate");
    const auto* mode = arg ? std::get_if<std::string>(&arg->value) : nullptr;
    std::string approximate = mode ? *mode : "none";
    if (approximate != "tanh") {
      refuse(fmt::format("aten::gelu with approximate='{}' (the erf form) has no cuBLASLt epilogue: cuBLASLt's GELU "
                         "epilogue is the tanh approximation",
                         approximate));
    }
    program_.epilogue = MatmulEpilogue::GeluTanh;
  }

  // Every tensor involved: on one CUDA device, one of the three dtypes, all the same.
  void check_types() {
    std::vector<int> ids{a_, b_};
    if (bias_ >= 0) ids.push_back(bias_);
    for (const auto& node : group_.nodes) ids.push_back(node.outputs.front());
    const auto& first = group_.value(a_).type;
    for (int id : ids) {
      const auto& type = group_.value(id).type;
      if (!type.device.is_cuda()) refuse(fmt::format("%{} is on {}, not CUDA", id, type.device.str()));
      if (type.device != first.device) {
        refuse(fmt::format("%{} is on {} but %{} on {}", id, type.device.str(), a_, first.device.str()));
      }
      if (type.dtype != c10::ScalarType::Float && type.dtype != c10::ScalarType::Half &&
          type.dtype != c10::ScalarType::BFloat16) {
        refuse(fmt::format("%{} is {}; cuBLASLt matmuls here take float32, float16 or bfloat16", id,
                           ir::dtype_name(type.dtype)));
      }
      if (type.dtype != first.dtype) {
        refuse(fmt::format("mixed dtypes: %{} is {} but %{} is {}", a_, ir::dtype_name(first.dtype), id,
                           ir::dtype_name(type.dtype)));
      }
    }
    program_.dtype = first.dtype;
  }

  MatrixView view_of(int id, bool transposed, const char* what) const {
    const auto& type = group_.value(id).type;
    auto view = view_matrices(type.sizes.data(), type.strides.data(), static_cast<int>(type.rank()), program_.leading,
                              transposed);
    if (!view) {
      refuse(fmt::format("{} (%{}, {}): its leading dims do not fold into one {} stride", what, id, type_text(type),
                         program_.leading == LeadingDims::Batch ? "batch" : "row"));
    }
    return *view;
  }

  void check_shapes() {
    const auto& a = group_.value(a_).type;
    const auto& b = group_.value(b_).type;
    auto av = view_of(a_, false, "A");
    auto bv = view_of(b_, program_.b_stored_transposed, "B");
    if (av.cols.count != bv.rows.count) {
      refuse(fmt::format("inner dimensions differ: {} @ {}", shape_text(a.sizes), shape_text(b.sizes)));
    }
    const auto n = bv.cols.count;
    if (program_.leading == LeadingDims::Batch) {
      if (av.batch.count != bv.batch.count) {
        refuse(fmt::format("batch dimensions differ: {} @ {}", shape_text(a.sizes), shape_text(b.sizes)));
      }
      if (av.batch.count > 1 && (av.batch.stride <= 0 || bv.batch.stride <= 0)) {
        refuse("an operand is broadcast over the batch (batch stride 0); only distinct batch matrices are run");
      }
    }
    // [..., M, N] either way: A's leading dims are the batch or more rows.
    std::vector<std::int64_t> expected(a.sizes.begin(), a.sizes.end() - 1);
    expected.push_back(n);
    for (const auto& node : group_.nodes) {
      const auto& out = group_.value(node.outputs.front()).type;
      if (out.sizes != expected) {
        refuse(fmt::format("{} gives {} where the product is {} (a broadcasting add is not a bias epilogue)",
                           node.qualified_name(), shape_text(out.sizes), shape_text(expected)));
      }
    }
    const auto& out = group_.value(group_.outputs.front()).type;
    if (!is_contiguous(out.sizes.data(), out.strides.data(), static_cast<int>(out.rank()))) {
      refuse(fmt::format("the output ({}) is not row-major contiguous", type_text(out)));
    }
    if (bias_ >= 0) check_bias(n);
    program_.a_rank = static_cast<int>(a.rank());
    program_.b_rank = static_cast<int>(b.rank());
    program_.output_rank = static_cast<int>(out.rank());
  }

  // cuBLASLt's BIAS epilogue adds one packed vector of N to every row of the (row-major) result.
  void check_bias(std::int64_t n) {
    const auto& bias = group_.value(bias_).type;
    std::vector<std::int64_t> squeezed = bias.sizes;
    while (squeezed.size() > 1 && squeezed.front() == 1) squeezed.erase(squeezed.begin());
    const char* source = bias_from_add_ ? "the added tensor" : "the bias";
    if (squeezed.size() != 1 || squeezed.front() != n) {
      refuse(fmt::format("{} (%{}) is {}; the cuBLASLt bias epilogue adds a [N] = [{}] vector (leading 1s allowed) to "
                         "every row",
                         source, bias_, shape_text(bias.sizes), n));
    }
    if (n > 1 && bias.strides.back() != 1) {
      refuse(fmt::format("{} (%{}, {}) is not packed; the bias epilogue reads it with stride 1", source, bias_,
                         type_text(bias)));
    }
    program_.bias_rank = static_cast<int>(bias.rank());
  }

  void check_layouts() {
    program_.a_order = layout_of(a_, false, "A");
    program_.b_order = layout_of(b_, program_.b_stored_transposed, "B");
  }

  MatrixOrder layout_of(int id, bool transposed, const char* what) const {
    auto order = order_of(view_of(id, transposed, what));
    if (!order) {
      refuse(fmt::format("{} (%{}, {}) is neither row- nor column-major in its last two dims with a leading "
                         "dimension cuBLASLt accepts",
                         what, id, type_text(group_.value(id).type)));
    }
    return *order;
  }

  int input_index(int id, const char* what) const {
    auto it = std::find(group_.inputs.begin(), group_.inputs.end(), id);
    if (it == group_.inputs.end()) refuse(fmt::format("{} (%{}) is not an input of the group", what, id));
    return static_cast<int>(it - group_.inputs.begin());
  }

  std::string key() const {
    const auto& p = program_;
    std::string bias = p.bias_input < 0 ? "none" : fmt::format("in{} rank{}", p.bias_input, p.bias_rank);
    return fmt::format(
        "zenith-cublaslt v{} | {} | {} | {} | inputs {} | A in{} rank{} {} | B in{} rank{} {}{} | bias {} | out rank{} | "
        "epilogue {}",
        kCublasLtMatmulVersion, ir::dtype_name(p.dtype), fmt::join(p.ops, " > "),
        p.leading == LeadingDims::Batch ? "batched" : "rows-folded", p.input_count, p.a_input, p.a_rank,
        order_name(p.a_order), p.b_input, p.b_rank, order_name(p.b_order), p.b_stored_transposed ? " (stored as B^T)" : "",
        bias, p.output_rank, epilogue_name(p.epilogue));
  }

  const ir::Graph& group_;
  MatmulProgram program_;
  int a_ = -1, b_ = -1, bias_ = -1;
  bool bias_from_add_ = false;
  int current_ = -1;  // the result of the last node read
};

}  // namespace

std::variant<MatmulProgram, std::string> plan_matmul(const ir::Graph& group) {
  try {
    return Planner(group).run();
  } catch (const Refusal& refusal) {
    return refusal.reason;
  }
}
}  // namespace zenith::cuda
