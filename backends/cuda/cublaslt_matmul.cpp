#include "backends/cuda/cublaslt_matmul.h"

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>

#include <cublasLt.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

namespace zenith::cuda {
namespace {

// ----------------------------------------------------------------------------------------------
// Matrix geometry, shared by planning (IR types) and running (DLTensors) so both read a tensor the
// same way.

// One dimension, or several folded into one: `count` entries `stride` elements apart.
struct Axis {
  std::int64_t count = 1;
  std::int64_t stride = 0;
};

// Dims [begin, end) as one axis, or nullopt when their entries are not equally spaced. Size-1 dims
// are skipped (their stride is meaningless); an empty range is one entry.
std::optional<Axis> fold(const std::int64_t* sizes, const std::int64_t* strides, int begin, int end) {
  Axis axis;
  int inner = -1;
  bool equally_spaced = true;
  for (int d = end - 1; d >= begin; --d) {
    if (sizes[d] == 1) continue;
    axis.count *= sizes[d];
    if (inner < 0) axis.stride = strides[d];
    else if (strides[d] != strides[inner] * sizes[inner]) equally_spaced = false;
    inner = d;
  }
  if (!equally_spaced && axis.count != 0) return std::nullopt;
  return axis;
}

// A tensor read as `batch` matrices of rows × cols.
struct MatrixView {
  Axis batch;
  Axis rows;
  Axis cols;
};

// How the product reads a tensor: its last dim is columns; with FoldIntoRows every other dim is
// rows, with Batch the dim before the last is rows and the rest are the batch. `transposed` swaps
// rows and columns (linear's weight holds Bᵀ). nullopt when leading dims do not fold.
std::optional<MatrixView> view_matrices(const std::int64_t* sizes, const std::int64_t* strides, int rank,
                                        LeadingDims leading, bool transposed) {
  MatrixView view;
  view.cols = Axis{sizes[rank - 1], strides[rank - 1]};
  if (leading == LeadingDims::Batch) {
    auto batch = fold(sizes, strides, 0, rank - 2);
    if (!batch) return std::nullopt;
    view.batch = *batch;
    view.rows = Axis{sizes[rank - 2], strides[rank - 2]};
  } else {
    auto rows = fold(sizes, strides, 0, rank - 1);
    if (!rows) return std::nullopt;
    view.rows = *rows;
  }
  if (transposed) std::swap(view.rows, view.cols);
  return view;
}

// Whether the matrices have `order` with a leading dimension cuBLASLt accepts (at least the
// column-major row count, so columns never overlap). Size-1 dims fit any stride.
bool fits(MatrixOrder order, const MatrixView& m) {
  const auto rows = m.rows.count, cols = m.cols.count;
  if (order == MatrixOrder::RowMajor) {
    return (cols <= 1 || m.cols.stride == 1) && (rows <= 1 || m.rows.stride >= std::max<std::int64_t>(cols, 1));
  }
  return (rows <= 1 || m.rows.stride == 1) && (cols <= 1 || m.cols.stride >= std::max<std::int64_t>(rows, 1));
}

// Row-major first: a contiguous matrix fits both orders only when it is a single row or column.
std::optional<MatrixOrder> order_of(const MatrixView& m) {
  if (fits(MatrixOrder::RowMajor, m)) return MatrixOrder::RowMajor;
  if (fits(MatrixOrder::ColumnMajor, m)) return MatrixOrder::ColumnMajor;
  return std::nullopt;
}

// The leading dimension for cuBLASLt. With a single row (column) the stride is never used and may
// be anything, but cuBLASLt still demands ld >= its row count, so it is replaced.
std::int64_t leading_dimension(MatrixOrder order, const MatrixView& m) {
  if (order == MatrixOrder::RowMajor) return m.rows.count <= 1 ? std::max<std::int64_t>(m.cols.count, 1) : m.rows.stride;
  return m.cols.count <= 1 ? std::max<std::int64_t>(m.rows.count, 1) : m.cols.stride;
}

// PyTorch's rule: size-1 dims may have any stride, and an empty tensor is contiguous whatever its
// strides ([7, 0] gets strides [1, 1]).
bool is_contiguous(const std::int64_t* sizes, const std::int64_t* strides, int rank) {
  if (std::find(sizes, sizes + rank, 0) != sizes + rank) return true;
  std::int64_t expected = 1;
  for (int d = rank - 1; d >= 0; --d) {
    if (sizes[d] != 1 && strides[d] != expected) return false;
    expected *= sizes[d];
  }
  return true;
}

const char* order_name(MatrixOrder order) { return order == MatrixOrder::RowMajor ? "row-major" : "column-major"; }

const char* epilogue_name(MatmulEpilogue epilogue) {
  switch (epilogue) {
    case MatmulEpilogue::None: return "none";
    case MatmulEpilogue::Relu: return "relu";
    case MatmulEpilogue::GeluTanh: return "gelu-tanh";
  }
  return "?";
}

std::uint64_t fnv1a(const std::string& text) {
  std::uint64_t hash = 1469598103934665603ull;
  for (unsigned char c : text) hash = (hash ^ c) * 1099511628211ull;
  return hash;
}

// ----------------------------------------------------------------------------------------------
// Planning: from a group to a MatmulProgram, or a reason.

struct Refusal {
  std::string reason;
};

[[noreturn]] void refuse(std::string reason) { throw Refusal{std::move(reason)}; }

std::string shape_text(const std::vector<std::int64_t>& sizes) { return fmt::format("[{}]", fmt::join(sizes, ", ")); }

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
    program_.name = fmt::format("zenith_cublaslt_{:016x}", fnv1a(program_.key));
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

// ----------------------------------------------------------------------------------------------
// Running: cuBLASLt calls, checked.

void check(cublasStatus_t status, const char* call) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw std::runtime_error(
        fmt::format("{} failed: {} ({})", call, cublasLtGetStatusName(status), cublasLtGetStatusString(status)));
  }
}

void check(cudaError_t status, const char* call) {
  if (status != cudaSuccess) {
    throw std::runtime_error(fmt::format("{} failed: {} ({})", call, cudaGetErrorName(status), cudaGetErrorString(status)));
  }
}

struct DescDeleter {
  void operator()(cublasLtMatmulDesc_t d) const { cublasLtMatmulDescDestroy(d); }
};
struct LayoutDeleter {
  void operator()(cublasLtMatrixLayout_t l) const { cublasLtMatrixLayoutDestroy(l); }
};
struct PreferenceDeleter {
  void operator()(cublasLtMatmulPreference_t p) const { cublasLtMatmulPreferenceDestroy(p); }
};
using MatmulDesc = std::unique_ptr<cublasLtMatmulDescOpaque_t, DescDeleter>;
using Layout = std::unique_ptr<cublasLtMatrixLayoutOpaque_t, LayoutDeleter>;
using Preference = std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, PreferenceDeleter>;

// The width cuBLASLt's attributes document for each value (int32, uint32, int64, uint64, pointers).
template <typename T>
void set(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute, T value) {
  check(cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof(value)), "cublasLtMatmulDescSetAttribute");
}
template <typename T>
void set(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attribute, T value) {
  check(cublasLtMatrixLayoutSetAttribute(layout, attribute, &value, sizeof(value)), "cublasLtMatrixLayoutSetAttribute");
}
template <typename T>
void set(cublasLtMatmulPreference_t preference, cublasLtMatmulPreferenceAttributes_t attribute, T value) {
  check(cublasLtMatmulPreferenceSetAttribute(preference, attribute, &value, sizeof(value)),
        "cublasLtMatmulPreferenceSetAttribute");
}

// What the heuristic may use; 32 MiB is what cuBLAS itself recommends for Hopper.
constexpr std::uint64_t kMaxWorkspaceBytes = 32ull << 20;

cudaDataType_t cuda_type(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::ScalarType::Half: return CUDA_R_16F;
    case c10::ScalarType::BFloat16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
  }
}

DLDataType dlpack_type(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::ScalarType::Half: return {kDLFloat, 16, 1};
    case c10::ScalarType::BFloat16: return {kDLBfloat, 16, 1};
    default: return {kDLFloat, 32, 1};
  }
}

std::int64_t element_size(c10::ScalarType dtype) { return dtype == c10::ScalarType::Float ? 4 : 2; }

cublasLtEpilogue_t lt_epilogue(MatmulEpilogue epilogue, bool bias) {
  switch (epilogue) {
    case MatmulEpilogue::Relu: return bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
    case MatmulEpilogue::GeluTanh: return bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
    case MatmulEpilogue::None: break;
  }
  return bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
}

// The largest power of two up to 256 dividing every value: the byte alignment an algorithm may
// assume of a matrix's start, columns and batch entries.
std::uint32_t alignment(std::initializer_list<std::uint64_t> values) {
  std::uint64_t bits = 256;
  for (auto v : values) bits |= v;
  return static_cast<std::uint32_t>(bits & (~bits + 1));
}

// A DLTensor's sizes and strides (compact row-major when DLPack leaves strides out).
struct Dims {
  std::vector<std::int64_t> sizes;
  std::vector<std::int64_t> strides;
  int rank() const { return static_cast<int>(sizes.size()); }
};

Dims dims_of(const DLTensor& t) {
  Dims dims;
  dims.sizes.assign(t.shape, t.shape + t.ndim);
  if (t.strides != nullptr) {
    dims.strides.assign(t.strides, t.strides + t.ndim);
  } else {
    dims.strides.assign(static_cast<std::size_t>(t.ndim), 1);
    for (int d = t.ndim - 2; d >= 0; --d) dims.strides[d] = dims.strides[d + 1] * std::max<std::int64_t>(t.shape[d + 1], 1);
  }
  return dims;
}

void* address(const DLTensor& t) { return static_cast<char*>(t.data) + t.byte_offset; }

// A tensor the program reads or writes, checked against what the program was planned for.
const DLTensor& operand(const std::vector<const DLTensor*>& tensors, int index, const MatmulProgram& program,
                        int rank, const char* what) {
  if (index < 0 || static_cast<std::size_t>(index) >= tensors.size() || tensors[index] == nullptr) {
    throw std::runtime_error(fmt::format("{}: {} (tensor {}) was not passed", program.name, what, index));
  }
  const DLTensor& t = *tensors[index];
  const auto want = dlpack_type(program.dtype);
  if (t.dtype.code != want.code || t.dtype.bits != want.bits || t.dtype.lanes != want.lanes) {
    throw std::runtime_error(fmt::format("{}: {} is not {}", program.name, what, ir::dtype_name(program.dtype)));
  }
  if (t.device.device_type != kDLCUDA) throw std::runtime_error(fmt::format("{}: {} is not on a CUDA device", program.name, what));
  if (t.ndim != rank) {
    throw std::runtime_error(fmt::format("{}: {} has {} dims, the program was planned for {}", program.name, what, t.ndim, rank));
  }
  return t;
}

MatrixView view_at_run(const MatmulProgram& program, const Dims& dims, bool transposed, const char* what) {
  auto view = view_matrices(dims.sizes.data(), dims.strides.data(), dims.rank(), program.leading, transposed);
  if (!view) {
    throw std::runtime_error(fmt::format("{}: {} {} strides {} has leading dims that do not fold into one stride",
                                         program.name, what, shape_text(dims.sizes), shape_text(dims.strides)));
  }
  return *view;
}

// One matrix as cuBLASLt reads it: column-major rows × cols, ld apart, `op` applied in the product.
struct LtMatrix {
  const void* data = nullptr;
  cublasOperation_t op = CUBLAS_OP_N;
  std::uint64_t rows = 0;
  std::uint64_t cols = 0;
  std::int64_t ld = 0;
  std::int64_t batch_stride = 0;
  std::uint32_t alignment = 256;
};

// A row-major matrix is its own transpose in column-major terms (op N turns it back into the
// factor Cᵀ = Bᵀ·Aᵀ needs); a column-major one is the matrix itself (op T).
LtMatrix lt_matrix(const void* data, MatrixOrder order, const MatrixView& view, std::int64_t element_bytes) {
  LtMatrix m;
  m.data = data;
  m.op = order == MatrixOrder::RowMajor ? CUBLAS_OP_N : CUBLAS_OP_T;
  const auto rows = static_cast<std::uint64_t>(view.rows.count), cols = static_cast<std::uint64_t>(view.cols.count);
  m.rows = order == MatrixOrder::RowMajor ? cols : rows;
  m.cols = order == MatrixOrder::RowMajor ? rows : cols;
  m.ld = leading_dimension(order, view);
  m.batch_stride = view.batch.count > 1 ? view.batch.stride : 0;
  m.alignment = alignment({reinterpret_cast<std::uintptr_t>(data), static_cast<std::uint64_t>(m.ld * element_bytes),
                           static_cast<std::uint64_t>(m.batch_stride * element_bytes)});
  return m;
}

// Everything that decides the cuBLASLt call except the pointers: the algorithm cache's key.
struct Problem {
  cudaDataType_t type = CUDA_R_32F;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  LtMatrix first;   // Bᵀ's factor (cuBLASLt's A)
  LtMatrix second;  // Aᵀ's factor (cuBLASLt's B)
  LtMatrix out;     // Cᵀ, column-major N × M (cuBLASLt's C and D)
  std::int32_t batch = 1;
  const void* bias = nullptr;
  std::uint32_t bias_alignment = 256;
  int device = 0;

  std::string key() const {
    auto text = [](const LtMatrix& m) {
      return fmt::format("{}{}x{} ld{} s{} a{}", m.op == CUBLAS_OP_T ? "T" : "N", m.rows, m.cols, m.ld, m.batch_stride,
                         m.alignment);
    };
    return fmt::format("t{} e{} | {} | {} | {} | batch {} | bias {} a{} | device {}", static_cast<int>(type),
                       static_cast<int>(epilogue), text(first), text(second), text(out), batch, bias != nullptr,
                       bias_alignment, device);
  }
};

Layout make_layout(const Problem& problem, const LtMatrix& m) {
  cublasLtMatrixLayout_t raw = nullptr;
  check(cublasLtMatrixLayoutCreate(&raw, problem.type, m.rows, m.cols, m.ld), "cublasLtMatrixLayoutCreate");
  Layout layout(raw);
  if (problem.batch > 1) {
    set<std::int32_t>(raw, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, problem.batch);
    set<std::int64_t>(raw, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, m.batch_stride);
  }
  return layout;
}

// The descriptors and algorithm of one problem, chosen once. The mutex guards the bias pointer,
// the one descriptor attribute that changes between launches.
struct CachedMatmul {
  MatmulDesc desc;
  Layout first, second, out;
  cublasLtMatmulAlgo_t algo{};
  std::size_t workspace_bytes = 0;
  std::mutex mutex;
};

std::unique_ptr<CachedMatmul> choose_algorithm(cublasLtHandle_t handle, const Problem& problem) {
  auto cached = std::make_unique<CachedMatmul>();
  cublasLtMatmulDesc_t desc = nullptr;
  // Full float32 accumulation for every dtype: PyTorch's default float32 matmul is not TF32.
  check(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
  cached->desc.reset(desc);
  set<std::int32_t>(desc, CUBLASLT_MATMUL_DESC_TRANSA, problem.first.op);
  set<std::int32_t>(desc, CUBLASLT_MATMUL_DESC_TRANSB, problem.second.op);
  set<std::uint32_t>(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, problem.epilogue);
  // The bias is the output's dtype, cuBLASLt's default (BIAS_DATA_TYPE -1 means Dtype) for float32,
  // float16 and bfloat16 alike, so its type is left unset, as PyTorch's gemm_and_bias does. The
  // heuristic reads the pointer's alignment; it is replaced by each launch's own.
  if (problem.bias != nullptr) set<const void*>(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, problem.bias);
  cached->first = make_layout(problem, problem.first);
  cached->second = make_layout(problem, problem.second);
  cached->out = make_layout(problem, problem.out);

  cublasLtMatmulPreference_t raw_preference = nullptr;
  check(cublasLtMatmulPreferenceCreate(&raw_preference), "cublasLtMatmulPreferenceCreate");
  Preference preference(raw_preference);
  set<std::uint64_t>(raw_preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, kMaxWorkspaceBytes);
  set<std::uint32_t>(raw_preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, problem.first.alignment);
  set<std::uint32_t>(raw_preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, problem.second.alignment);
  set<std::uint32_t>(raw_preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, problem.out.alignment);
  // No preference names the bias's alignment; D's is lowered to it so that an algorithm assuming
  // more of the epilogue's pointers is never picked (PyTorch passes the bias's there too).
  set<std::uint32_t>(raw_preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                     std::min(problem.out.alignment, problem.bias_alignment));

  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  check(cublasLtMatmulAlgoGetHeuristic(handle, desc, cached->first.get(), cached->second.get(), cached->out.get(),
                                       cached->out.get(), raw_preference, 1, &result, &found),
        "cublasLtMatmulAlgoGetHeuristic");
  if (found == 0) {
    throw std::runtime_error(fmt::format("cublasLtMatmulAlgoGetHeuristic found no algorithm for {}", problem.key()));
  }
  check(result.state, "cublasLtMatmulAlgoGetHeuristic (result state)");
  cached->algo = result.algo;
  cached->workspace_bytes = result.workspaceSize;
  return cached;
}

// Memory from the host's allocator, handed back when the launch has been enqueued (the allocator
// orders reuse on the stream, so freeing before the kernel runs is safe).
class Workspace {
 public:
  Workspace(std::size_t bytes, const std::function<void*(std::size_t)>& allocate, const std::function<void(void*)>& release)
      : release_(release) {
    if (bytes == 0) return;
    data_ = allocate(bytes);
    if (data_ == nullptr) throw std::runtime_error(fmt::format("allocating {} bytes of cuBLASLt workspace failed", bytes));
  }
  ~Workspace() {
    if (data_ != nullptr) release_(data_);
  }
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  void* data() const { return data_; }

 private:
  const std::function<void(void*)>& release_;
  void* data_ = nullptr;
};

// M, N, K and the batch count of a launch, once A, B and the output are seen to agree and the
// output to be contiguous.
struct LaunchSizes {
  std::int64_t m, n, k, batch;
};

LaunchSizes launch_sizes(const MatmulProgram& program, const MatrixView& av, const MatrixView& bv, const MatrixView& ov,
                         const Dims& a, const Dims& b, const Dims& out) {
  const LaunchSizes sizes{av.rows.count, bv.cols.count, av.cols.count,
                          program.leading == LeadingDims::Batch ? av.batch.count : 1};
  if (bv.rows.count != sizes.k || ov.rows.count != sizes.m || ov.cols.count != sizes.n ||
      (program.leading == LeadingDims::Batch && (bv.batch.count != sizes.batch || ov.batch.count != sizes.batch))) {
    throw std::runtime_error(fmt::format("{}: shapes do not match: A {} B {} output {}", program.name,
                                         shape_text(a.sizes), shape_text(b.sizes), shape_text(out.sizes)));
  }
  if (!is_contiguous(out.sizes.data(), out.strides.data(), out.rank())) {
    throw std::runtime_error(fmt::format("{}: the output {} strides {} is not row-major contiguous", program.name,
                                         shape_text(out.sizes), shape_text(out.strides)));
  }
  return sizes;
}

// The bias of a launch: a packed vector of N on the output's device.
void attach_bias(Problem& problem, const MatmulProgram& program, const std::vector<const DLTensor*>& inputs,
                 std::int64_t n, int device) {
  const DLTensor& bias = operand(inputs, program.bias_input, program, program.bias_rank, "the bias");
  const auto dims = dims_of(bias);
  std::int64_t count = 1;
  for (auto s : dims.sizes) count *= s;
  if (count != n || (n > 1 && dims.strides.back() != 1) || bias.device.device_id != device) {
    throw std::runtime_error(fmt::format("{}: the bias {} strides {} is not a packed vector of N = {} on the output's device",
                                         program.name, shape_text(dims.sizes), shape_text(dims.strides), n));
  }
  problem.bias = address(bias);
  problem.bias_alignment = alignment({reinterpret_cast<std::uintptr_t>(problem.bias)});
}

// Elements per zero row for K == 0: 16 bytes, which every algorithm accepts.
std::int64_t zero_inner_length(std::int64_t element_bytes) { return 16 / element_bytes; }

// K == 0 leaves nothing to sum, yet the result is epilogue(bias), or zeros. The same epilogue then
// runs over a product of two zero matrices with a short inner dimension, over all `rows` rows of
// the contiguous output at once (batches included). `zeros` holds max(rows, n) zero rows.
Problem zero_inner_problem(Problem problem, const void* zeros, void* out, std::int64_t rows, std::int64_t n,
                           std::int64_t element_bytes) {
  const std::int64_t kz = zero_inner_length(element_bytes);
  problem.batch = 1;
  problem.first = lt_matrix(zeros, MatrixOrder::RowMajor, MatrixView{Axis{}, Axis{kz, n}, Axis{n, 1}}, element_bytes);
  problem.second = lt_matrix(zeros, MatrixOrder::RowMajor, MatrixView{Axis{}, Axis{rows, kz}, Axis{kz, 1}}, element_bytes);
  problem.out = lt_matrix(out, MatrixOrder::RowMajor, MatrixView{Axis{}, Axis{rows, n}, Axis{n, 1}}, element_bytes);
  return problem;
}

}  // namespace

std::variant<MatmulProgram, std::string> plan_matmul(const ir::Graph& group) {
  try {
    return Planner(group).run();
  } catch (const Refusal& refusal) {
    return refusal.reason;
  }
}

struct CublasLtMatmul::State {
  cublasLtHandle_t handle = nullptr;
  mutable std::mutex mutex;  // guards `cache`
  std::map<std::string, std::unique_ptr<CachedMatmul>> cache;

  CachedMatmul& cached(const Problem& problem) {
    auto key = problem.key();
    std::lock_guard<std::mutex> lock(mutex);
    auto it = cache.find(key);
    if (it == cache.end()) it = cache.emplace(key, choose_algorithm(handle, problem)).first;
    return *it->second;
  }

  void enqueue(const Problem& problem, void* out, cudaStream_t stream, const std::function<void*(std::size_t)>& allocate,
               const std::function<void(void*)>& release) {
    CachedMatmul& matmul = cached(problem);
    Workspace workspace(matmul.workspace_bytes, allocate, release);
    const float alpha = 1.f, beta = 0.f;  // beta 0: C (the output itself) is never read
    std::lock_guard<std::mutex> lock(matmul.mutex);
    if (problem.bias != nullptr) set<const void*>(matmul.desc.get(), CUBLASLT_MATMUL_DESC_BIAS_POINTER, problem.bias);
    check(cublasLtMatmul(handle, matmul.desc.get(), &alpha, problem.first.data, matmul.first.get(), problem.second.data,
                         matmul.second.get(), &beta, out, matmul.out.get(), out, matmul.out.get(), &matmul.algo,
                         workspace.data(), matmul.workspace_bytes, stream),
          "cublasLtMatmul");
  }
};

CublasLtMatmul::CublasLtMatmul() : state_(std::make_unique<State>()) {
  check(cublasLtCreate(&state_->handle), "cublasLtCreate");
}

CublasLtMatmul::~CublasLtMatmul() {
  state_->cache.clear();  // descriptors before the handle
  if (state_->handle != nullptr) cublasLtDestroy(state_->handle);
}

std::size_t CublasLtMatmul::cached_algorithms() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->cache.size();
}

void CublasLtMatmul::run(const MatmulProgram& program, const std::vector<const DLTensor*>& inputs,
                         const std::vector<const DLTensor*>& outputs, cudaStream_t stream,
                         const std::function<void*(std::size_t)>& allocate_workspace,
                         const std::function<void(void*)>& free_workspace) const {
  if (static_cast<int>(inputs.size()) != program.input_count || outputs.size() != 1) {
    throw std::runtime_error(fmt::format("{}: takes {} inputs and 1 output, the launch passed {} and {}", program.name,
                                         program.input_count, inputs.size(), outputs.size()));
  }
  const DLTensor& a = operand(inputs, program.a_input, program, program.a_rank, "A");
  const DLTensor& b = operand(inputs, program.b_input, program, program.b_rank, "B");
  const DLTensor& out = operand(outputs, 0, program, program.output_rank, "the output");
  const auto a_dims = dims_of(a), b_dims = dims_of(b), out_dims = dims_of(out);
  const auto av = view_at_run(program, a_dims, false, "A");
  const auto bv = view_at_run(program, b_dims, program.b_stored_transposed, "B");
  const auto ov = view_at_run(program, out_dims, false, "the output");
  const auto [m, n, k, batch] = launch_sizes(program, av, bv, ov, a_dims, b_dims, out_dims);
  if (m == 0 || n == 0 || batch == 0) return;  // nothing to write
  if (batch > std::numeric_limits<std::int32_t>::max()) {
    throw std::runtime_error(fmt::format("{}: {} batch entries exceed cuBLASLt's int32 batch count", program.name, batch));
  }
  if (a.device.device_id != out.device.device_id || b.device.device_id != out.device.device_id) {
    throw std::runtime_error(fmt::format("{}: the operands are on different devices", program.name));
  }

  Problem problem;
  problem.type = cuda_type(program.dtype);
  problem.device = out.device.device_id;
  problem.epilogue = lt_epilogue(program.epilogue, program.bias_input >= 0);
  if (program.bias_input >= 0) attach_bias(problem, program, inputs, n, out.device.device_id);
  const auto bytes = element_size(program.dtype);

  if (k == 0) {
    const std::int64_t rows = m * batch;
    const auto zero_bytes = static_cast<std::size_t>(std::max(rows, n) * zero_inner_length(bytes) * bytes);
    Workspace zeros(zero_bytes, allocate_workspace, free_workspace);
    check(cudaMemsetAsync(zeros.data(), 0, zero_bytes, stream), "cudaMemsetAsync");
    state_->enqueue(zero_inner_problem(problem, zeros.data(), address(out), rows, n, bytes), address(out), stream,
                    allocate_workspace, free_workspace);
    return;
  }

  if (!fits(program.a_order, av) || !fits(program.b_order, bv)) {
    throw std::runtime_error(fmt::format("{}: A {} strides {} or B {} strides {} is no longer {} / {} as planned",
                                         program.name, shape_text(a_dims.sizes), shape_text(a_dims.strides),
                                         shape_text(b_dims.sizes), shape_text(b_dims.strides), order_name(program.a_order),
                                         order_name(program.b_order)));
  }
  if (batch > 1 && (av.batch.stride <= 0 || bv.batch.stride <= 0)) {
    throw std::runtime_error(fmt::format("{}: an operand is broadcast over the batch (batch stride 0)", program.name));
  }
  problem.batch = static_cast<std::int32_t>(batch);
  problem.out = lt_matrix(address(out), MatrixOrder::RowMajor, ov, bytes);
  problem.first = lt_matrix(address(b), program.b_order, bv, bytes);
  problem.second = lt_matrix(address(a), program.a_order, av, bytes);
  state_->enqueue(problem, address(out), stream, allocate_workspace, free_workspace);
}

}  // namespace zenith::cuda
