// Planning cuBLASLt matmuls, without a GPU: every accepted form plans with the right operands,
// layouts and epilogue; keys follow what changes the program and never a size; every refusal says
// why. And the matrix-vector kernel for products with few rows (matrix_vector.h): which forms have
// it, its source compiles with NVRTC for every dtype, bias and epilogue, which launches it serves.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "backends/cuda/matmul_plan.h"
#include "backends/cuda/matrix_vector.h"
#include "cuda/codegen_test_support.h"
#include "unit/graph_builders.h"

namespace zenith::cuda {
namespace {

using testing::GraphBuilder;
using testing::real;
using testing::scalar;
using testing::value;

using codegen_test::on_cuda;

// Gives value `id` other strides, as a view (transpose, slice) run on the host before the group would.
void restride(ir::Graph& graph, int id, std::vector<std::int64_t> sizes, std::vector<std::int64_t> strides) {
  graph.value(id).type.sizes = std::move(sizes);
  graph.value(id).type.strides = std::move(strides);
}

// What follows the product: "+bias" adds a [N] input, then "relu", "gelu" (tanh) or "gelu-erf".
int tail(GraphBuilder& b, int product, std::int64_t n, const std::string& what, c10::ScalarType dtype) {
  int result = product;
  if (what.find("+bias") != std::string::npos) {
    int bias = b.input({n}, dtype);
    result = b.op("aten::add", "Tensor", {value("self", result), value("other", bias), scalar("alpha", 1)});
  }
  if (what.find("relu") != std::string::npos) result = b.op("aten::relu", "", {value("self", result)});
  if (what.find("gelu") != std::string::npos) {
    std::string approximate = what.find("gelu-erf") != std::string::npos ? "none" : "tanh";
    result = b.op("aten::gelu", "", {value("self", result), {"approximate", approximate}});
  }
  return result;
}

ir::Graph mm(std::int64_t m, std::int64_t k, std::int64_t n, const std::string& what = "",
             c10::ScalarType dtype = at::kFloat) {
  GraphBuilder b;
  int x = b.input({m, k}, dtype);
  int w = b.input({k, n}, dtype);
  int y = b.op("aten::mm", "", {value("self", x), value("mat2", w)});
  return on_cuda(b.finish({tail(b, y, n, what, dtype)}));
}

ir::Graph addmm(std::int64_t m, std::int64_t k, std::int64_t n, std::vector<std::int64_t> bias_sizes,
                const std::string& what = "", c10::ScalarType dtype = at::kFloat, double beta = 1.0) {
  GraphBuilder b;
  int bias = b.input(bias_sizes, dtype);
  int x = b.input({m, k}, dtype);
  int w = b.input({k, n}, dtype);
  int y = b.op("aten::addmm", "",
               {value("self", bias), value("mat1", x), value("mat2", w), real("beta", beta), scalar("alpha", 1)});
  return on_cuda(b.finish({tail(b, y, n, what, dtype)}));
}

ir::Graph bmm(std::int64_t batch, std::int64_t m, std::int64_t k, std::int64_t n, const std::string& what = "") {
  GraphBuilder b;
  int x = b.input({batch, m, k});
  int w = b.input({batch, k, n});
  int y = b.op("aten::bmm", "", {value("self", x), value("mat2", w)});
  return on_cuda(b.finish({tail(b, y, n, what, at::kFloat)}));
}

ir::Graph matmul(std::vector<std::int64_t> a, std::vector<std::int64_t> b_sizes, const std::string& what = "") {
  GraphBuilder b;
  int x = b.input(a);
  int w = b.input(b_sizes);
  int y = b.op("aten::matmul", "", {value("self", x), value("other", w)});
  return on_cuda(b.finish({tail(b, y, b_sizes.back(), what, at::kFloat)}));
}

ir::Graph linear(std::vector<std::int64_t> x_sizes, std::int64_t n, bool bias, const std::string& what = "",
                 c10::ScalarType dtype = at::kFloat) {
  GraphBuilder b;
  int x = b.input(x_sizes, dtype);
  int w = b.input({n, x_sizes.back()}, dtype);
  ir::Argument bias_arg = testing::none("bias");
  if (bias) bias_arg = value("bias", b.input({n}, dtype));
  int y = b.op("aten::linear", "", {value("input", x), value("weight", w), bias_arg});
  return on_cuda(b.finish({tail(b, y, n, what, dtype)}));
}

MatmulProgram plan_or_fail(const ir::Graph& graph) {
  auto planned = plan_matmul(graph);
  if (const auto* why = std::get_if<std::string>(&planned)) {
    ADD_FAILURE() << "not planned: " << *why;
    return {};
  }
  return std::get<MatmulProgram>(planned);
}

std::string refusal(const ir::Graph& graph) {
  auto planned = plan_matmul(graph);
  if (const auto* program = std::get_if<MatmulProgram>(&planned)) {
    ADD_FAILURE() << "planned, expected a refusal: " << program->key;
    return "";
  }
  return std::get<std::string>(planned);
}

struct Accepted {
  std::string what;
  ir::Graph graph;
  MatmulEpilogue epilogue;
  bool bias;
  LeadingDims leading;
};

TEST(CublasLtMatmulPlan, EveryFormPlansWithItsEpilogue) {
  const auto none = MatmulEpilogue::None, relu = MatmulEpilogue::Relu, gelu = MatmulEpilogue::GeluTanh;
  const auto rows = LeadingDims::FoldIntoRows, batch = LeadingDims::Batch;
  std::vector<Accepted> cases = {
      {"mm", mm(6, 3, 5), none, false, rows},
      {"mm + relu", mm(6, 3, 5, "relu"), relu, false, rows},
      {"mm + gelu tanh", mm(6, 3, 5, "gelu"), gelu, false, rows},
      {"mm + bias", mm(6, 3, 5, "+bias"), none, true, rows},
      {"mm + bias + gelu", mm(6, 3, 5, "+bias gelu"), gelu, true, rows},
      {"addmm [N]", addmm(6, 3, 5, {5}), none, true, rows},
      {"addmm [1, N]", addmm(6, 3, 5, {1, 5}), none, true, rows},
      {"addmm + relu", addmm(6, 3, 5, {5}, "relu"), relu, true, rows},
      {"bmm", bmm(3, 6, 4, 5), none, false, batch},
      {"bmm + bias + relu", bmm(3, 6, 4, 5, "+bias relu"), relu, true, batch},
      {"matmul 2-D @ 2-D", matmul({6, 3}, {3, 5}), none, false, rows},
      {"matmul 3-D @ 2-D", matmul({2, 6, 3}, {3, 5}), none, false, rows},
      {"matmul 3-D @ 3-D", matmul({2, 6, 3}, {2, 3, 5}, "gelu"), gelu, false, batch},
      {"matmul 4-D @ 4-D", matmul({2, 3, 6, 4}, {2, 3, 4, 5}), none, false, batch},
      {"linear", linear({2, 6, 3}, 5, false), none, false, rows},
      {"linear with bias", linear({2, 6, 3}, 5, true), none, true, rows},
      {"linear with bias + relu", linear({6, 3}, 5, true, "relu"), relu, true, rows},
      {"linear with bias + gelu", linear({2, 6, 3}, 5, true, "gelu"), gelu, true, rows},
      {"linear + bias add + gelu", linear({2, 6, 3}, 5, false, "+bias gelu"), gelu, true, rows},
      {"linear of a vector", linear({3}, 5, true), none, true, rows},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    auto program = plan_or_fail(c.graph);
    EXPECT_EQ(program.epilogue, c.epilogue);
    EXPECT_EQ(program.bias_input >= 0, c.bias);
    EXPECT_EQ(program.leading, c.leading);
    EXPECT_EQ(program.dtype, at::kFloat);
    EXPECT_EQ(program.input_count, static_cast<int>(c.graph.inputs.size()));
    EXPECT_EQ(program.ops.size(), c.graph.nodes.size());
    EXPECT_EQ(program.name.rfind("zenith_cublaslt_", 0), 0u) << program.name;
  }
}

TEST(CublasLtMatmulPlan, OperandsAndLayouts) {
  auto plain = plan_or_fail(addmm(6, 3, 5, {5}));
  EXPECT_EQ(plain.bias_input, 0);  // addmm's self
  EXPECT_EQ(plain.a_input, 1);
  EXPECT_EQ(plain.b_input, 2);
  EXPECT_EQ(plain.a_order, MatrixOrder::RowMajor);
  EXPECT_EQ(plain.b_order, MatrixOrder::RowMajor);
  EXPECT_FALSE(plain.b_stored_transposed);

  // linear's weight [N, K] holds Bᵀ: B as the product reads it is column-major.
  auto lin = plan_or_fail(linear({2, 6, 3}, 5, true));
  EXPECT_TRUE(lin.b_stored_transposed);
  EXPECT_EQ(lin.b_order, MatrixOrder::ColumnMajor);
  EXPECT_EQ(lin.a_rank, 3);
  EXPECT_EQ(lin.output_rank, 3);
  EXPECT_EQ(lin.bias_input, 2);

  // mm(x, w.t()) and mm(x.t(), w): the transposes arrive as strides.
  auto graph = mm(6, 3, 5);
  restride(graph, graph.inputs[1], {3, 5}, {1, 3});
  EXPECT_EQ(plan_or_fail(graph).b_order, MatrixOrder::ColumnMajor);
  graph = mm(6, 3, 5);
  restride(graph, graph.inputs[0], {6, 3}, {1, 6});
  EXPECT_EQ(plan_or_fail(graph).a_order, MatrixOrder::ColumnMajor);

  // A row-major slice (rows further apart than their length) keeps its leading dimension.
  graph = mm(6, 3, 5);
  restride(graph, graph.inputs[0], {6, 3}, {8, 1});
  EXPECT_EQ(plan_or_fail(graph).a_order, MatrixOrder::RowMajor);

  // bias added as add(bias, product) is the same bias.
  GraphBuilder b;
  int x = b.input({6, 3});
  int w = b.input({3, 5});
  int bias = b.input({5});
  int y = b.op("aten::mm", "", {value("self", x), value("mat2", w)});
  int z = b.op("aten::add", "Tensor", {value("self", bias), value("other", y), scalar("alpha", 1)});
  EXPECT_EQ(plan_or_fail(on_cuda(b.finish({z}))).bias_input, 2);
}

TEST(CublasLtMatmulPlan, KeysHoldNoSizes) {
  EXPECT_EQ(plan_or_fail(mm(6, 3, 5)).key, plan_or_fail(mm(1000, 3, 5)).key);
  EXPECT_EQ(plan_or_fail(linear({2, 7, 64}, 32, true, "gelu")).key,
            plan_or_fail(linear({8, 129, 64}, 32, true, "gelu")).key);  // new batch and sequence length
  EXPECT_EQ(plan_or_fail(linear({2, 7, 64}, 32, true)).key, plan_or_fail(linear({2, 7, 128}, 96, true)).key);
  EXPECT_EQ(plan_or_fail(bmm(3, 6, 4, 5)).key, plan_or_fail(bmm(8, 100, 4, 5)).key);
  EXPECT_EQ(plan_or_fail(matmul({2, 6, 3}, {2, 3, 5})).key, plan_or_fail(matmul({5, 60, 3}, {5, 3, 5})).key);
  EXPECT_EQ(plan_or_fail(mm(6, 3, 5)).name, plan_or_fail(mm(7, 3, 5)).name);
}

TEST(CublasLtMatmulPlan, KeysFollowWhatChangesTheProgram) {
  auto key = [](const ir::Graph& g) { return plan_or_fail(g).key; };
  const auto base = key(linear({2, 6, 3}, 5, true));
  EXPECT_NE(base, key(linear({2, 6, 3}, 5, true, "", at::kHalf)));       // dtype
  EXPECT_NE(base, key(linear({2, 6, 3}, 5, true, "", at::kBFloat16)));   // dtype
  EXPECT_NE(base, key(linear({2, 6, 3}, 5, false)));                     // bias
  EXPECT_NE(base, key(linear({2, 6, 3}, 5, true, "relu")));              // epilogue
  EXPECT_NE(key(linear({2, 6, 3}, 5, true, "relu")), key(linear({2, 6, 3}, 5, true, "gelu")));
  EXPECT_NE(base, key(linear({6, 3}, 5, true)));                         // rank
  EXPECT_NE(key(mm(6, 3, 5)), key(matmul({6, 3}, {3, 5})));             // op

  auto transposed = mm(6, 3, 5);
  restride(transposed, transposed.inputs[1], {3, 5}, {1, 3});  // mm(x, w.t())
  EXPECT_NE(key(mm(6, 3, 5)), key(transposed));
  auto weight_rows = linear({6, 3}, 5, true);
  restride(weight_rows, weight_rows.inputs[1], {5, 3}, {1, 5});  // linear(x, wt.t())
  EXPECT_NE(key(linear({6, 3}, 5, true)), key(weight_rows));
  EXPECT_EQ(plan_or_fail(weight_rows).b_order, MatrixOrder::RowMajor);
}

void expect_refused(const ir::Graph& graph, const std::vector<std::string>& mentions) {
  auto reason = refusal(graph);
  for (const auto& word : mentions) EXPECT_NE(reason.find(word), std::string::npos) << "reason: " << reason;
}

TEST(CublasLtMatmulPlan, RefusalsSayWhy) {
  SCOPED_TRACE("refusals");
  expect_refused(mm(6, 3, 5, "gelu-erf"), {"erf", "tanh"});
  expect_refused(linear({6, 3}, 5, true, "gelu-erf"), {"approximate='none'"});
  expect_refused(addmm(6, 3, 5, {5}, "", at::kFloat, 0.5), {"beta"});
  expect_refused(addmm(6, 3, 5, {6, 5}), {"[6, 5]", "bias"});
  expect_refused(matmul({2, 6, 3}, {1, 3, 5}), {"broadcasts batch"});
  expect_refused(matmul({6, 3}, {2, 3, 5}), {"broadcasts batch"});
  expect_refused(matmul({6, 3}, {3}), {"1-D"});

  {  // mixed dtypes: a float32 product plus a float16 bias (promoted to float32 by eager add)
    GraphBuilder b;
    int x = b.input({6, 3});
    int w = b.input({5, 3});
    int bias = b.input({5}, at::kHalf);
    int y = b.op("aten::linear", "", {value("input", x), value("weight", w), testing::none("bias")});
    int z = b.op("aten::add", "Tensor", {value("self", y), value("other", bias), scalar("alpha", 1)});
    expect_refused(on_cuda(b.finish({z})), {"mixed dtypes", "float16", "float32"});
  }
  {  // integers
    GraphBuilder b;
    int x = b.input({6, 3}, at::kLong);
    int w = b.input({3, 5}, at::kLong);
    int y = b.op("aten::mm", "", {value("self", x), value("mat2", w)});
    expect_refused(on_cuda(b.finish({y})), {"int64"});
  }
  {  // an intermediate read after the group
    GraphBuilder b;
    int x = b.input({6, 3});
    int w = b.input({3, 5});
    int y = b.op("aten::mm", "", {value("self", x), value("mat2", w)});
    int r = b.op("aten::relu", "", {value("self", y)});
    expect_refused(on_cuda(b.finish({y, r})), {"read outside", "aten::mm"});
    auto single_output = on_cuda(b.finish({r}));
    single_output.outputs = {y};  // the product is the output, relu's result is lost
    expect_refused(single_output, {"read outside"});
  }
  {  // a residual add is not a bias
    GraphBuilder b;
    int x = b.input({6, 3});
    int w = b.input({3, 5});
    int residual = b.input({6, 5});
    int y = b.op("aten::mm", "", {value("self", x), value("mat2", w)});
    int z = b.op("aten::add", "Tensor", {value("self", y), value("other", residual), scalar("alpha", 1)});
    expect_refused(on_cuda(b.finish({z})), {"added tensor", "[6, 5]"});
  }
  {  // a scaled add, and an add after the activation
    GraphBuilder b;
    int x = b.input({6, 3});
    int w = b.input({3, 5});
    int bias = b.input({5});
    int y = b.op("aten::mm", "", {value("self", x), value("mat2", w)});
    int z = b.op("aten::add", "Tensor", {value("self", y), value("other", bias), scalar("alpha", 2)});
    expect_refused(on_cuda(b.finish({z})), {"alpha"});
  }
  {
    GraphBuilder b;
    int x = b.input({6, 3});
    int w = b.input({3, 5});
    int bias = b.input({5});
    int y = b.op("aten::mm", "", {value("self", x), value("mat2", w)});
    int r = b.op("aten::relu", "", {value("self", y)});
    int z = b.op("aten::add", "Tensor", {value("self", r), value("other", bias), scalar("alpha", 1)});
    expect_refused(on_cuda(b.finish({z})), {"after the activation"});
  }
  {  // not a product
    GraphBuilder b;
    int x = b.input({6, 3});
    expect_refused(on_cuda(b.finish({b.op("aten::relu", "", {value("self", x)})})), {"not a matrix product"});
  }
  // Not on CUDA.
  {
    GraphBuilder b;
    int x = b.input({6, 3});
    int w = b.input({3, 5});
    expect_refused(b.finish({b.op("aten::mm", "", {value("self", x), value("mat2", w)})}), {"cpu", "not CUDA"});
  }
  // Layouts cuBLASLt cannot address: every other column, a batch broadcast with stride 0, a batch
  // whose entries are not equally spaced.
  auto strided = mm(6, 4, 5);
  restride(strided, strided.inputs[0], {6, 4}, {8, 2});
  expect_refused(strided, {"neither row- nor column-major"});
  auto expanded = bmm(3, 6, 4, 5);
  restride(expanded, expanded.inputs[1], {3, 4, 5}, {0, 5, 1});
  expect_refused(expanded, {"broadcast over the batch"});
  auto unfoldable = matmul({2, 3, 6, 4}, {2, 3, 4, 5});
  restride(unfoldable, unfoldable.inputs[0], {2, 3, 6, 4}, {24, 48, 4, 1});
  expect_refused(unfoldable, {"do not fold"});
}

// --- The matrix-vector kernel ------------------------------------------------------------------

// A DLTensor on "cuda:0" over a CPU tensor's description: matrix_vector_fit reads sizes, strides,
// dtype, device and addresses, never the data.
DLTensor cuda_view(const at::Tensor& t) {
  DLTensor d = codegen_test::view(t);
  d.device = {kDLCUDA, 0};
  d.dtype = t.scalar_type() == at::kBFloat16 ? DLDataType{kDLBfloat, 16, 1}
                                              : DLDataType{kDLFloat, static_cast<std::uint8_t>(t.element_size() * 8), 1};
  return d;
}

// Whether the kernel takes y = linear(x, w[, bias]) for these tensors (bias may be undefined).
std::optional<MatrixVectorLaunch> fit(const MatmulProgram& program, const at::Tensor& x, const at::Tensor& w,
                                      const at::Tensor& bias, const at::Tensor& out) {
  std::vector<DLTensor> views{cuda_view(x), cuda_view(w)};
  if (bias.defined()) views.push_back(cuda_view(bias));
  const DLTensor out_view = cuda_view(out);
  std::vector<const DLTensor*> inputs(static_cast<std::size_t>(program.input_count), nullptr);
  inputs.at(program.a_input) = &views[0];
  inputs.at(program.b_input) = &views[1];
  if (bias.defined()) inputs.at(program.bias_input) = &views[2];
  return matrix_vector_fit(program, inputs, {&out_view});
}

TEST(MatrixVector, OnlyLinearsFormHasTheKernel) {
  EXPECT_TRUE(has_matrix_vector_form(plan_or_fail(linear({1, 64}, 32, false))));
  EXPECT_TRUE(has_matrix_vector_form(plan_or_fail(linear({2, 1, 64}, 32, true, "gelu", at::kHalf))));
  // A traced linear: matmul(x, weight.t()), B a column-major view of the [N, K] weight.
  auto traced = matmul({1, 1, 64}, {64, 32});
  restride(traced, traced.inputs[1], {64, 32}, {1, 64});
  EXPECT_TRUE(has_matrix_vector_form(plan_or_fail(traced)));
  EXPECT_FALSE(has_matrix_vector_form(plan_or_fail(mm(1, 64, 32)))) << "mm's B is a row-major [K, N]";
  EXPECT_FALSE(has_matrix_vector_form(plan_or_fail(bmm(3, 1, 64, 32)))) << "a batch of products";
}

TEST(MatrixVector, BuiltOnlyForOneRowAndAWeightThatCanFit) {
  // Up to 256 MiB of weight: 65536 x 2048 float16 is 256 MiB exactly, 65544 rows are more; float32
  // halves it.
  EXPECT_TRUE(matrix_vector_may_serve(plan_or_fail(linear({1, 2048}, 65536, false, "", at::kHalf)),
                                      linear({1, 2048}, 65536, false, "", at::kHalf)));
  auto big = linear({1, 2048}, 65544, false, "", at::kHalf);
  EXPECT_FALSE(matrix_vector_may_serve(plan_or_fail(big), big));
  auto wide = linear({1, 2048}, 65536, false, "", at::kFloat);
  EXPECT_FALSE(matrix_vector_may_serve(plan_or_fail(wide), wide));
  auto batched = bmm(3, 1, 64, 32);
  EXPECT_FALSE(matrix_vector_may_serve(plan_or_fail(batched), batched)) << "not linear's form";
  // A of one row, leading dims of one folded in; two rows (a prompt's, or a batch of two tokens) go to cuBLASLt.
  auto token = linear({1, 1, 2048}, 256, false, "", at::kHalf);
  EXPECT_TRUE(matrix_vector_may_serve(plan_or_fail(token), token));
  auto two = linear({2, 1, 2048}, 256, false, "", at::kHalf);
  EXPECT_FALSE(matrix_vector_may_serve(plan_or_fail(two), two));
  auto prompt = linear({1, 128, 2048}, 256, false, "", at::kHalf);
  EXPECT_FALSE(matrix_vector_may_serve(plan_or_fail(prompt), prompt));
}

TEST(MatrixVector, EverySourceCompiles) {
  for (auto dtype : {at::kFloat, at::kHalf, at::kBFloat16}) {
    for (const char* what : {"", "+bias", "relu", "+bias relu", "gelu", "+bias gelu"}) {
      const bool bias = std::string(what).find("+bias") != std::string::npos;
      auto program = plan_or_fail(linear({1, 64}, 32, false, bias ? "" : what, dtype));
      if (bias) program = plan_or_fail(linear({1, 64}, 32, true, std::string(what).substr(5), dtype));
      const auto name = matrix_vector_name(program);
      EXPECT_NE(name.find(dtype == at::kFloat ? "f32" : dtype == at::kHalf ? "f16" : "bf16"), std::string::npos) << name;
      EXPECT_EQ(name.find("_bias") != std::string::npos, bias) << name;
      codegen_test::expect_compiles(matrix_vector_source(program), name);
    }
  }
}

TEST(MatrixVector, ServesOneRowOfAlignedContiguousOperands) {
  const auto half = at::TensorOptions().dtype(at::kHalf);
  const auto program = plan_or_fail(linear({1, 64}, 32, false, "", at::kHalf));
  const auto with_bias = plan_or_fail(linear({1, 64}, 32, true, "", at::kHalf));
  auto w = at::zeros({32, 64}, half);
  auto served = [&](const at::Tensor& x, const at::Tensor& weight, const at::Tensor& out) {
    return fit(program, x, weight, at::Tensor(), out).has_value();
  };
  // One row, also with leading dims of one folded into it (a token of a [1, 1, K] batch).
  auto one = fit(program, at::zeros({1, 64}, half), w, at::Tensor(), at::zeros({1, 32}, half));
  ASSERT_TRUE(one.has_value());
  EXPECT_EQ(one->n, 32);
  EXPECT_EQ(one->k, 64);
  EXPECT_EQ(one->ldw, 64);
  EXPECT_EQ(one->bias, nullptr);
  EXPECT_TRUE(served(at::zeros({1, 1, 64}, half), w, at::zeros({1, 1, 32}, half)));
  // The row a slice of a wider tensor: its stride does not matter.
  EXPECT_TRUE(served(at::zeros({3, 128}, half).narrow(0, 1, 1).narrow(1, 0, 64), w, at::zeros({1, 32}, half)));
  // The bias is passed.
  auto bias = at::zeros({32}, half);
  auto biased = fit(with_bias, at::zeros({1, 64}, half), w, bias, at::zeros({1, 32}, half));
  ASSERT_TRUE(biased.has_value());
  EXPECT_EQ(biased->bias, bias.data_ptr());

  // cuBLASLt's: a weight above 256 MiB (never measured), two rows (measured slower at eight: see
  // matrix_vector.h), K not a multiple of 16 bytes, misaligned A, a transposed weight, a strided
  // output, a bias that is not packed.
  // (at::empty: fit reads descriptions only, and untouched pages cost nothing.)
  EXPECT_TRUE(served(at::zeros({1, 2048}, half), at::empty({65536, 2048}, half), at::zeros({1, 65536}, half)));
  EXPECT_FALSE(served(at::zeros({1, 2048}, half), at::empty({65544, 2048}, half), at::zeros({1, 65544}, half)));
  EXPECT_FALSE(served(at::zeros({2, 64}, half), w, at::zeros({2, 32}, half)));
  EXPECT_FALSE(served(at::zeros({2, 1, 64}, half), w, at::zeros({2, 1, 32}, half)));
  auto w60 = at::zeros({32, 60}, half);
  EXPECT_FALSE(served(at::zeros({1, 60}, half), w60, at::zeros({1, 32}, half)));
  EXPECT_FALSE(served(at::zeros({1, 65}, half).narrow(1, 1, 64), w, at::zeros({1, 32}, half)));
  EXPECT_FALSE(served(at::zeros({1, 64}, half), at::zeros({64, 32}, half).t(), at::zeros({1, 32}, half)))
      << "the weight's transpose: unit stride along N";
  EXPECT_FALSE(served(at::zeros({1, 64}, half), w, at::zeros({64}, half).slice(0, 0, 64, 2).view({1, 32})));
  EXPECT_FALSE(fit(with_bias, at::zeros({1, 64}, half), w, at::zeros({64}, half).slice(0, 0, 64, 2),
                   at::zeros({1, 32}, half)).has_value());
  // Another dtype than the program's.
  EXPECT_FALSE(served(at::zeros({1, 64}), w, at::zeros({1, 32}, half)));

  // The traced form (float32, as the matmul builder makes it): B is the weight's transpose, a view.
  auto traced = matmul({1, 1, 64}, {64, 32});
  restride(traced, traced.inputs[1], {64, 32}, {1, 64});
  const auto matmul_program = plan_or_fail(traced);
  auto weight = at::zeros({32, 64});
  auto from_matmul = fit(matmul_program, at::zeros({1, 1, 64}), weight.t(), at::Tensor(), at::zeros({1, 1, 32}));
  ASSERT_TRUE(from_matmul.has_value());
  EXPECT_EQ(from_matmul->n, 32);
  EXPECT_EQ(from_matmul->ldw, 64);
  EXPECT_EQ(from_matmul->w, weight.data_ptr());
}

TEST(MatrixVector, WarpsPerElementFillTheDeviceWithoutStarvingLanes) {
  // The TinyLlama-shaped decoder's products on 132 multiprocessors, float16.
  EXPECT_EQ(matrix_vector_warps_per_element(32000, 2048, 2, 132), 1) << "lm_head: a warp a row";
  EXPECT_EQ(matrix_vector_warps_per_element(5632, 2048, 2, 132), 1) << "gate and up";
  EXPECT_EQ(matrix_vector_warps_per_element(2560, 2048, 2, 132), 1) << "q, k and v as one product";
  EXPECT_EQ(matrix_vector_warps_per_element(2048, 2048, 2, 132), 2) << "q and o: 2048 rows, fewer than 16 x 132";
  EXPECT_EQ(matrix_vector_warps_per_element(2048, 5632, 2, 132), 2) << "down";
  EXPECT_EQ(matrix_vector_warps_per_element(256, 2048, 2, 132), 4) << "k and v: all four warps of a block";
  // A short row keeps every lane busy: K = 512 float16 is 64 chunks, one per lane of two warps.
  EXPECT_EQ(matrix_vector_warps_per_element(16, 512, 2, 132), 2);
  EXPECT_EQ(matrix_vector_warps_per_element(16, 8, 2, 132), 1);
}

}  // namespace
}  // namespace zenith::cuda
