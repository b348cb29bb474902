// Matrix-product groups planned for cuBLASLt: plan_matmul reads a group (one mm/addmm/bmm/matmul/
// linear, then optionally a [N] bias add and a relu or tanh-gelu) and returns a MatmulProgram, or
// why it cannot. The program never holds a size: CublasLtMatmul (cublaslt_matmul.h) reads M, N, K,
// the batch count, leading dimensions and batch strides from the tensors of each launch, so a
// program planned for one sequence length runs every other.
#pragma once

#include <string>
#include <variant>
#include <vector>

#include "core/graph.h"

namespace zenith::cuda {

/// Bumped whenever what a program does changes for the same group: part of every key.
constexpr int kCublasLtMatmulVersion = 1;

/// The activation applied after the product (and its bias, when there is one).
enum class MatmulEpilogue {
  None,
  Relu,
  GeluTanh,  ///< gelu(x, approximate="tanh"): cuBLASLt's GELU epilogue is this approximation
};

/// How a matrix operand sits in memory, over the two dimensions the product reads.
enum class MatrixOrder {
  RowMajor,     ///< unit stride along a row; rows a leading dimension apart
  ColumnMajor,  ///< unit stride down a column; columns a leading dimension apart
};

/// What the dimensions in front of a matrix's last two mean.
enum class LeadingDims {
  FoldIntoRows,  ///< A's and the output's leading dims are more rows of one product; B is 2-D
  Batch,         ///< A, B and the output share identical batch dims: one product per batch entry
};

/// Everything needed to run one group, for every size of its operands.
struct MatmulProgram {
  /// Canonical text of what changes the program: version, dtype, ops, how leading dims are read,
  /// each operand's input index, rank and layout class, bias, epilogue. Never a size.
  std::string key;
  /// "zenith_cublaslt_<hash of key>".
  std::string name;
  /// float32, float16 or bfloat16: every tensor of the group has it.
  c10::ScalarType dtype = c10::ScalarType::Float;
  /// How A's (and the output's) leading dims are read.
  LeadingDims leading = LeadingDims::FoldIntoRows;
  /// Number of group inputs the launch passes.
  int input_count = 0;
  /// Index into the group's inputs of A, the left operand ([..., M, K]).
  int a_input = -1;
  /// Index into the group's inputs of the right operand's tensor.
  int b_input = -1;
  /// The tensor holds Bᵀ ([..., N, K]: linear's weight) rather than B ([..., K, N]).
  bool b_stored_transposed = false;
  /// Index into the group's inputs of the bias ([N] or [1, N], contiguous), or -1 for none.
  int bias_input = -1;
  /// Layout class of A and of B (B as the product reads it, after b_stored_transposed).
  MatrixOrder a_order = MatrixOrder::RowMajor;
  MatrixOrder b_order = MatrixOrder::RowMajor;
  /// Ranks of A's tensor, B's tensor, the bias (0 without one) and the output.
  int a_rank = 0;
  int b_rank = 0;
  int bias_rank = 0;
  int output_rank = 0;
  /// The activation after the product and bias.
  MatmulEpilogue epilogue = MatmulEpilogue::None;
  /// The group's ops in order, e.g. {"aten::linear", "aten::gelu"} (for the key and messages).
  std::vector<std::string> ops;
};

/// The program for `group` (a "group" graph whose types are the exact ones of this signature), or
/// a readable reason why cuBLASLt cannot run it: another op, an erf gelu, a bias that is not a [N]
/// vector, a scaled addmm, broadcast batch dims, mixed or unsupported dtypes, a device other than
/// CUDA, an intermediate result read outside the group, or a layout cuBLASLt cannot address.
std::variant<MatmulProgram, std::string> plan_matmul(const ir::Graph& group);

}  // namespace zenith::cuda
