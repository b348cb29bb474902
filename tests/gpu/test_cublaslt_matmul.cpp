// cuBLASLt matmuls on the GPU, driven directly (no plugin): every accepted form in float32,
// float16 and bfloat16, across sizes and layouts, against eager LibTorch. Each form is planned once,
// at a small size, and that one program runs every size: the plans are shape-generic. Outputs are
// filled with NaN before each run, so an element the matmul fails to write shows. Labelled `gpu`.
//
// Tolerances, as max |got - want| / max |want|:
// - float32: both sides accumulate in float32 (eager's default matmul is not TF32), in different
//   orders. Rounding K products grows like sqrt(K) ulps of the sum in a random walk, and the sum of
//   K random products is itself sqrt(K) times an operand product, so the relative difference stays
//   near 1e-7 (K=3) to 1e-6 (K=1024). 1e-5·sqrt(K) leaves a wide margin yet fails TF32 (10-bit
//   mantissa: ~1e-3) and any wrong element. GELU adds cuBLASLt's own tanh, whose accuracy cuBLASLt
//   does not document; a hardware tanh approximation (~5e-4 relative of tanh) would put up to ~1e-4
//   on the result, so GELU runs get at least 2e-4.
// - float16 and bfloat16: cuBLASLt rounds once, after bias and activation, where eager rounds after
//   each op; a few units in the last place of the storage type: 1e-2 (float16), 4e-2 (bfloat16).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <utility>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include "backends/cuda/cublaslt_matmul.h"
#include "backends/cuda/matmul_workspace_bound.h"
#include "runtime/signature.h"
#include "common_relative_error.h"
#include "core/dlpack_view.h"
#include "unit/graph_builders.h"

namespace zenith::cuda {
namespace {

using testing::GraphBuilder;
using testing::relative_error;
using testing::scalar;
using testing::value;

struct Size {
  std::int64_t m, n, k;
};
constexpr std::int64_t kBatch = 3;
const Size kPlanSize{6, 5, 4};  // every dim above 1, so each operand's layout class is unambiguous

double tolerance(c10::ScalarType dtype, std::int64_t k, MatmulEpilogue epilogue) {
  if (dtype == at::kHalf) return 1e-2;
  if (dtype == at::kBFloat16) return 4e-2;
  double product = 1e-5 * std::sqrt(static_cast<double>(std::max<std::int64_t>(k, 1)));
  return epilogue == MatmulEpilogue::GeluTanh ? std::max(product, 2e-4) : product;
}

using Tensors = std::vector<at::Tensor>;

// One accepted form: its operands at a size (in group input order, in the layout the form tests),
// the group's nodes over those inputs, and eager LibTorch on the same tensors.
struct Form {
  std::string name;
  std::function<Tensors(const Size&, const at::TensorOptions&)> operands;
  std::function<int(GraphBuilder&, const std::vector<int>&)> build;
  std::function<at::Tensor(const Tensors&)> eager;
  MatmulEpilogue epilogue;
};

at::Tensor gelu_tanh(const at::Tensor& x) { return torch::gelu(x, "tanh"); }

int node(GraphBuilder& b, const char* op, std::vector<ir::Argument> args) { return b.op(op, "", std::move(args)); }
int relu(GraphBuilder& b, int x) { return node(b, "aten::relu", {value("self", x)}); }
int gelu(GraphBuilder& b, int x) { return node(b, "aten::gelu", {value("self", x), {"approximate", std::string("tanh")}}); }
int add(GraphBuilder& b, int x, int bias) {
  return b.op("aten::add", "Tensor", {value("self", x), value("other", bias), scalar("alpha", 1)});
}
int mm(GraphBuilder& b, int x, int w) { return node(b, "aten::mm", {value("self", x), value("mat2", w)}); }
int bmm(GraphBuilder& b, int x, int w) { return node(b, "aten::bmm", {value("self", x), value("mat2", w)}); }
int matmul(GraphBuilder& b, int x, int w) { return node(b, "aten::matmul", {value("self", x), value("other", w)}); }
int addmm(GraphBuilder& b, int bias, int x, int w) {
  return node(b, "aten::addmm",
              {value("self", bias), value("mat1", x), value("mat2", w), scalar("beta", 1), scalar("alpha", 1)});
}
int linear(GraphBuilder& b, int x, int w, std::optional<int> bias) {
  return node(b, "aten::linear",
              {value("input", x), value("weight", w), bias ? value("bias", *bias) : testing::none("bias")});
}

std::vector<Form> forms() {
  using O = const at::TensorOptions&;
  auto r = [](std::vector<std::int64_t> sizes, O o) { return torch::randn(sizes, o); };
  auto none = MatmulEpilogue::None, relu_ = MatmulEpilogue::Relu, gelu_ = MatmulEpilogue::GeluTanh;
  return {
      {"mm", [=](const Size& s, O o) { return Tensors{r({s.m, s.k}, o), r({s.k, s.n}, o)}; },
       [](GraphBuilder& b, const std::vector<int>& in) { return mm(b, in[0], in[1]); },
       [](const Tensors& t) { return torch::mm(t[0], t[1]); }, none},
      {"mm x @ w.t()", [=](const Size& s, O o) { return Tensors{r({s.m, s.k}, o), r({s.n, s.k}, o).t()}; },
       [](GraphBuilder& b, const std::vector<int>& in) { return mm(b, in[0], in[1]); },
       [](const Tensors& t) { return torch::mm(t[0], t[1]); }, none},
      {"mm x.t() @ w + relu", [=](const Size& s, O o) { return Tensors{r({s.k, s.m}, o).t(), r({s.k, s.n}, o)}; },
       [](GraphBuilder& b, const std::vector<int>& in) { return relu(b, mm(b, in[0], in[1])); },
       [](const Tensors& t) { return torch::relu(torch::mm(t[0], t[1])); }, relu_},
      {"mm + bias add + gelu",
       [=](const Size& s, O o) { return Tensors{r({s.m, s.k}, o), r({s.k, s.n}, o), r({s.n}, o)}; },
       [](GraphBuilder& b, const std::vector<int>& in) { return gelu(b, add(b, mm(b, in[0], in[1]), in[2])); },
       [](const Tensors& t) { return gelu_tanh(torch::mm(t[0], t[1]) + t[2]); }, gelu_},
      {"addmm [N]", [=](const Size& s, O o) { return Tensors{r({s.n}, o), r({s.m, s.k}, o), r({s.k, s.n}, o)}; },
       [](GraphBuilder& b, const std::vector<int>& in) { return addmm(b, in[0], in[1], in[2]); },
       [](const Tensors& t) { return torch::addmm(t[0], t[1], t[2]); }, none},
      {"addmm [1, N] + relu",
       [=](const Size& s, O o) { return Tensors{r({1, s.n}, o), r({s.m, s.k}, o), r({s.k, s.n}, o)}; },
       [](GraphBuilder& b, const std::vector<int>& in) { return relu(b, addmm(b, in[0], in[1], in[2])); },
       [](const Tensors& t) { return torch::relu(torch::addmm(t[0], t[1], t[2])); }, relu_},
      {"addmm x @ w.t() + gelu",
       [=](const Size& s, O o) { return Tensors{r({s.n}, o), r({s.m, s.k}, o), r({s.n, s.k}, o).t()}; },
       [](GraphBuilder& b, const std::vector<int>& in) { return gelu(b, addmm(b, in[0], in[1], in[2])); },
       [](const Tensors& t) { return gelu_tanh(torch::addmm(t[0], t[1], t[2])); }, gelu_},
      {"bmm", [=](const Size& s, O o) { return Tensors{r({kBatch, s.m, s.k}, o), r({kBatch, s.k, s.n}, o)}; },
       [](GraphBuilder& b, const std::vector<int>& in) { return bmm(b, in[0], in[1]); },
       [](const Tensors& t) { return torch::bmm(t[0], t[1]); }, none},
      {"bmm transposed operands + bias add + relu",
       [=](const Size& s, O o) {
         return Tensors{r({kBatch, s.k, s.m}, o).transpose(1, 2), r({kBatch, s.n, s.k}, o).transpose(1, 2), r({s.n}, o)};
       },
       [](GraphBuilder& b, const std::vector<int>& in) { return relu(b, add(b, bmm(b, in[0], in[1]), in[2])); },
       [](const Tensors& t) { return torch::relu(torch::bmm(t[0], t[1]) + t[2]); }, relu_},
      {"matmul 2-D @ 2-D", [=](const Size& s, O o) { return Tensors{r({s.m, s.k}, o), r({s.k, s.n}, o)}; },
       [](GraphBuilder& b, const std::vector<int>& in) { return matmul(b, in[0], in[1]); },
       [](const Tensors& t) { return torch::matmul(t[0], t[1]); }, none},
      {"matmul 3-D @ 2-D", [=](const Size& s, O o) { return Tensors{r({kBatch, s.m, s.k}, o), r({s.k, s.n}, o)}; },
       [](GraphBuilder& b, const std::vector<int>& in) { return matmul(b, in[0], in[1]); },
       [](const Tensors& t) { return torch::matmul(t[0], t[1]); }, none},
      {"matmul 3-D @ 3-D + gelu",
       [=](const Size& s, O o) { return Tensors{r({kBatch, s.m, s.k}, o), r({kBatch, s.k, s.n}, o)}; },
       [](GraphBuilder& b, const std::vector<int>& in) { return gelu(b, matmul(b, in[0], in[1])); },
       [](const Tensors& t) { return gelu_tanh(torch::matmul(t[0], t[1])); }, gelu_},
      {"matmul 4-D @ 4-D + bias add",
       [=](const Size& s, O o) {
         return Tensors{r({2, kBatch, s.m, s.k}, o), r({2, kBatch, s.k, s.n}, o), r({s.n}, o)};
       },
       [](GraphBuilder& b, const std::vector<int>& in) { return add(b, matmul(b, in[0], in[1]), in[2]); },
       [](const Tensors& t) { return torch::matmul(t[0], t[1]) + t[2]; }, none},
      {"linear", [=](const Size& s, O o) { return Tensors{r({kBatch, s.m, s.k}, o), r({s.n, s.k}, o)}; },
       [](GraphBuilder& b, const std::vector<int>& in) { return linear(b, in[0], in[1], std::nullopt); },
       [](const Tensors& t) { return torch::linear(t[0], t[1]); }, none},
      {"linear with bias",
       [=](const Size& s, O o) { return Tensors{r({kBatch, s.m, s.k}, o), r({s.n, s.k}, o), r({s.n}, o)}; },
       [](GraphBuilder& b, const std::vector<int>& in) { return linear(b, in[0], in[1], in[2]); },
       [](const Tensors& t) { return torch::linear(t[0], t[1], t[2]); }, none},
      {"linear with bias + relu",
       [=](const Size& s, O o) { return Tensors{r({kBatch, s.m, s.k}, o), r({s.n, s.k}, o), r({s.n}, o)}; },
       [](GraphBuilder& b, const std::vector<int>& in) { return relu(b, linear(b, in[0], in[1], in[2])); },
       [](const Tensors& t) { return torch::relu(torch::linear(t[0], t[1], t[2])); }, relu_},
      {"linear with bias + gelu",
       [=](const Size& s, O o) { return Tensors{r({kBatch, s.m, s.k}, o), r({s.n, s.k}, o), r({s.n}, o)}; },
       [](GraphBuilder& b, const std::vector<int>& in) { return gelu(b, linear(b, in[0], in[1], in[2])); },
       [](const Tensors& t) { return gelu_tanh(torch::linear(t[0], t[1], t[2])); }, gelu_},
      {"linear, weight stored [K, N], with bias + relu",
       [=](const Size& s, O o) { return Tensors{r({s.m, s.k}, o), r({s.k, s.n}, o).t(), r({s.n}, o)}; },
       [](GraphBuilder& b, const std::vector<int>& in) { return relu(b, linear(b, in[0], in[1], in[2])); },
       [](const Tensors& t) { return torch::relu(torch::linear(t[0], t[1], t[2])); }, relu_},
      {"linear of a row slice (lda > K)",
       [=](const Size& s, O o) { return Tensors{r({kBatch, s.m, s.k + 8}, o).narrow(2, 0, s.k), r({s.n, s.k}, o)}; },
       [](GraphBuilder& b, const std::vector<int>& in) { return linear(b, in[0], in[1], std::nullopt); },
       [](const Tensors& t) { return torch::linear(t[0], t[1]); }, none},
  };
}

Form form_named(const std::string& name) {
  for (auto& form : forms())
    if (form.name == name) return form;
  throw std::runtime_error("no form " + name);
}

// The group a form makes over `operands` (CPU tensors of the plan's size and layouts): the builder
// learns types by running the ops on CPU; inputs then take the operands' own strides, and every
// value moves to the GPU.
ir::Graph group_over(const Form& form, const Tensors& operands) {
  GraphBuilder b;
  std::vector<int> ids;
  for (const auto& t : operands) ids.push_back(b.input(t.sizes().vec(), t.scalar_type()));
  auto graph = b.finish({form.build(b, ids)});
  for (std::size_t i = 0; i < ids.size(); ++i) graph.value(ids[i]).type = type_of(operands[i]);
  for (auto& v : graph.values)
    if (v) v->type.device = c10::Device(c10::kCUDA, 0);
  return graph;
}

class CublasLtMatmulGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
    torch::manual_seed(42);
    matmul_ = std::make_unique<CublasLtMatmul>();
  }

  MatmulProgram plan(const Form& form, c10::ScalarType dtype) const {
    auto planned = plan_matmul(group_over(form, form.operands(kPlanSize, at::TensorOptions().dtype(dtype))));
    if (const auto* why = std::get_if<std::string>(&planned)) {
      ADD_FAILURE() << form.name << ": not planned: " << *why;
      return {};
    }
    return std::get<MatmulProgram>(planned);
  }

  // Runs `program` into a NaN-filled output of `sizes` on PyTorch's current stream; the largest
  // workspace the launch asked for goes into `largest_workspace` when given.
  at::Tensor run(const MatmulProgram& program, const Tensors& inputs, at::IntArrayRef sizes,
                 std::size_t* largest_workspace = nullptr, MatmulHistory* history = nullptr) const {
    auto out = torch::full(sizes, std::numeric_limits<double>::quiet_NaN(), inputs.front().options());
    std::vector<DLTensor> views;
    views.reserve(inputs.size());
    for (const auto& t : inputs) views.push_back(borrow_dlpack(t));
    std::vector<const DLTensor*> in;
    for (const auto& v : views) in.push_back(&v);
    DLTensor out_view = borrow_dlpack(out);
    auto stream = c10::cuda::getCurrentCUDAStream();
    matmul_->run(
        program, in, {&out_view}, stream.stream(),
        [&](std::size_t bytes) {
          if (largest_workspace != nullptr) *largest_workspace = std::max(*largest_workspace, bytes);
          return c10::cuda::CUDACachingAllocator::raw_alloc_with_stream(bytes, stream.stream());
        },
        [](void* p) { c10::cuda::CUDACachingAllocator::raw_delete(p); }, history);
    return out;
  }

  // Runs `form`'s program at `size` on two draws of fresh operands and compares each with eager:
  // the second launch of a problem must compute too, not repeat the first.
  void check(const Form& form, const MatmulProgram& program, c10::ScalarType dtype, const Size& size) const {
    for (int draw = 0; draw < 2; ++draw) {
      auto inputs = form.operands(size, at::TensorOptions().dtype(dtype).device(torch::kCUDA));
      auto want = form.eager(inputs);
      auto got = run(program, inputs, want.sizes());
      if (want.numel() == 0) return;
      EXPECT_LE(relative_error(got.to(at::kFloat), want.to(at::kFloat)), tolerance(dtype, size.k, form.epilogue))
          << form.name << " " << c10::toString(dtype) << " M=" << size.m << " N=" << size.n << " K=" << size.k
          << ", draw " << draw;
    }
  }

  std::unique_ptr<CublasLtMatmul> matmul_;
};

TEST_F(CublasLtMatmulGpu, EveryFormAcrossDtypesAndSizes) {
  torch::NoGradGuard no_grad;
  for (auto dtype : {at::kFloat, at::kHalf, at::kBFloat16}) {
    for (const auto& form : forms()) {
      auto program = plan(form, dtype);
      if (program.key.empty()) continue;
      EXPECT_EQ(program.epilogue, form.epilogue) << form.name;
      // One program, planned at 6 x 5 x 4, for every size below: M, N, K, odd and large.
      for (std::int64_t m : {1, 7, 128, 1000}) {
        for (std::int64_t n : {5, 64, 768}) {
          for (std::int64_t k : {3, 64, 1024}) check(form, program, dtype, Size{m, n, k});
        }
      }
    }
  }
}

TEST_F(CublasLtMatmulGpu, OneProgramEverySequenceLengthAndCachedAlgorithms) {
  torch::NoGradGuard no_grad;
  const auto form = form_named("linear with bias + gelu");
  auto program = plan(form, at::kHalf);
  const Size size{7, 768, 64};
  auto inputs = form.operands(size, at::TensorOptions().dtype(at::kHalf).device(torch::kCUDA));
  auto want = form.eager(inputs).to(at::kFloat);
  const double tol = tolerance(at::kHalf, size.k, form.epilogue);
  EXPECT_LE(relative_error(run(program, inputs, want.sizes()).to(at::kFloat), want), tol);
  const auto after_first = matmul_->cached_algorithms();
  EXPECT_GE(after_first, 1u);
  // The same problem again, on fresh operands: the cached algorithm, no heuristic query.
  auto fresh = form.operands(size, at::TensorOptions().dtype(at::kHalf).device(torch::kCUDA));
  auto fresh_want = form.eager(fresh).to(at::kFloat);
  EXPECT_LE(relative_error(run(program, fresh, fresh_want.sizes()).to(at::kFloat), fresh_want), tol);
  EXPECT_EQ(matmul_->cached_algorithms(), after_first);
  // A new sequence length, the same program: one more problem. Fresh tensors from the caching
  // allocator start on 512-byte block boundaries, so only the sizes differ, not the alignments.
  check(form, program, at::kHalf, Size{1000, 768, 64});
  EXPECT_EQ(matmul_->cached_algorithms(), after_first + 1);
}

// A launch asks for no more workspace than matmul_workspace_bound allows: the workspace is
// allocated per launch and adds to the peak of the plan or graph capture that runs the product.
// "addmm x @ w.t() + gelu" is a linear layer's form, at BERT-base b1's four products (128 tokens;
// with 32 MiB on offer, cuBLASLt's heuristic took 4 to 6 MiB for them in float32 on the H200 in
// bench/cublaslt_algorithms.cpp, and the same kernels with fewer splits fit 3 MiB), and at batch
// 32; "mm x.t() @ w + relu" is a weight gradient's
// (dY^T X), at 768 x 768 over 4096 rows, whose long inner dimension allows the heuristic its
// own pick. Each result is checked against eager. In float16 the H200's picks take no workspace:
// there the test checks the results only.
TEST_F(CublasLtMatmulGpu, WorkspaceStaysWithinTheBound) {
  torch::NoGradGuard no_grad;
  for (const char* name : {"addmm x @ w.t() + gelu", "mm x.t() @ w + relu"}) {
    const auto form = form_named(name);
    for (auto dtype : {at::kFloat, at::kHalf}) {
      auto program = plan(form, dtype);
      for (const Size& size : {Size{128, 768, 768}, Size{128, 2304, 768}, Size{128, 3072, 768}, Size{128, 768, 3072},
                               Size{4096, 768, 3072}, Size{768, 768, 4096}}) {
        for (int draw = 0; draw < 2; ++draw) {  // fresh operands: the second launch computes too
          auto inputs = form.operands(size, at::TensorOptions().dtype(dtype).device(torch::kCUDA));
          auto want = form.eager(inputs);
          std::size_t largest = 0;
          auto got = run(program, inputs, want.sizes(), &largest);
          const std::string where =
              fmt::format("{} {} M={} N={} K={}, draw {}", name, c10::toString(dtype), size.m, size.n, size.k, draw);
          EXPECT_LE(relative_error(got.to(at::kFloat), want.to(at::kFloat)), tolerance(dtype, size.k, form.epilogue))
              << where;
          const auto bytes = [&](std::int64_t rows, std::int64_t cols) {
            return static_cast<std::uint64_t>(rows * cols * want.element_size());
          };
          const auto bound = matmul_workspace_bound(bytes(size.m, size.n), bytes(size.m, size.k), bytes(size.k, size.n));
          EXPECT_LE(largest, bound) << where;
        }
      }
    }
  }
}

// The torture test's product (examples/dynamic_shapes: Linear(1024, 1024) + ReLU, batch 32) as one
// kernel at several sequence lengths, its weight and bias kept. Length 300 runs first as another
// kernel (no history), so that its fixed choice is cached before the kernel meets 300. The
// kernel's first length takes the heuristic's first pick, its second (550, the torture test's
// second warm-up length) the choice for varying columns, every later new length reuses that
// algorithm; a length met again is cached. Each result is checked against eager on fresh inputs,
// twice a length.
TEST_F(CublasLtMatmulGpu, OneKernelAtVaryingLengthsReusesItsVaryingChoice) {
  torch::NoGradGuard no_grad;
  const auto form = form_named("linear with bias + relu");
  constexpr std::int64_t kFeatures = 1024, kTokensBatch = 32;
  const auto properties = at::cuda::getCurrentDeviceProperties();
  for (auto dtype : {at::kFloat, at::kHalf}) {
    auto program = plan(form, dtype);
    const auto options = at::TensorOptions().dtype(dtype).device(torch::kCUDA);
    const auto layer = form.operands(Size{1, kFeatures, kFeatures}, options);  // input, weight [N, K], bias [N]
    MatmulHistory history;
    const auto varying_before = matmul_->varying_column_choices();
    const auto narrower_before = matmul_->narrower_tile_choices();
    const auto reused_before = matmul_->reused_algorithms();
    const std::pair<std::int64_t, MatmulHistory*> launches[] = {{300, nullptr}, {1000, &history}, {550, &history},
                                                                 {300, &history},  {128, &history},  {1000, &history}};
    for (const auto& [length, kernel_history] : launches) {
      for (int draw = 0; draw < 2; ++draw) {
        const Tensors inputs = {torch::randn({kTokensBatch, length, kFeatures}, options), layer[1], layer[2]};
        auto want = form.eager(inputs);
        auto got = run(program, inputs, want.sizes(), nullptr, kernel_history);
        EXPECT_LE(relative_error(got.to(at::kFloat), want.to(at::kFloat)), tolerance(dtype, kFeatures, form.epilogue))
            << c10::toString(dtype) << " length " << length << (kernel_history ? "" : " (another kernel)") << ", draw "
            << draw;
      }
    }
    // A cached fixed choice at 300 would hide the kernel's varying one there: 550, 300 and 128.
    EXPECT_EQ(matmul_->varying_column_choices() - varying_before, 3u) << c10::toString(dtype);
    EXPECT_EQ(matmul_->reused_algorithms() - reused_before, 2u) << c10::toString(dtype) << ": 300 and 128 reuse 550's";
    // The H200's probe of this product in float32 (docs/performance.md, the torture test's section)
    // found the first pick's algorithm with a 256 x 64 tile among the heuristic's picks at every
    // length; on that architecture the choice at 550 must take a narrower tile, or it does nothing.
    if (dtype == at::kFloat && properties->major == 9) {
      EXPECT_EQ(matmul_->narrower_tile_choices() - narrower_before, 1u) << "the choice at 550 kept the first pick";
    }
  }
}

TEST_F(CublasLtMatmulGpu, EmptyOutputsAndEmptyInnerDimension) {
  torch::NoGradGuard no_grad;
  auto all = forms();
  for (auto dtype : {at::kFloat, at::kHalf, at::kBFloat16}) {
    for (const auto& form : all) {
      auto program = plan(form, dtype);
      if (program.key.empty()) continue;
      check(form, program, dtype, Size{0, 5, 3});   // no rows: nothing launched, nothing thrown
      check(form, program, dtype, Size{7, 0, 3});   // no columns
      check(form, program, dtype, Size{7, 5, 0});   // K = 0: epilogue(bias) or zeros over a NaN-filled output
      check(form, program, dtype, Size{1, 64, 0});  // K = 0 with one row
    }
  }
}

TEST_F(CublasLtMatmulGpu, MisalignedOperands) {
  torch::NoGradGuard no_grad;
  const auto form = form_named("addmm [N]");
  for (auto dtype : {at::kFloat, at::kHalf, at::kBFloat16}) {
    auto program = plan(form, dtype);
    auto options = at::TensorOptions().dtype(dtype).device(torch::kCUDA);
    const std::int64_t m = 33, n = 64, k = 96;
    // Every operand starts one element past an aligned address.
    auto shifted = [&](std::vector<std::int64_t> sizes) {
      std::int64_t count = 1;
      for (auto s : sizes) count *= s;
      return torch::randn({count + 1}, options).narrow(0, 1, count).view(sizes);
    };
    for (int draw = 0; draw < 2; ++draw) {  // two draws of fresh operands, misaligned alike
      Tensors inputs{shifted({n}), shifted({m, k}), shifted({k, n})};
      auto want = form.eager(inputs);
      auto got = run(program, inputs, want.sizes());
      EXPECT_LE(relative_error(got.to(at::kFloat), want.to(at::kFloat)), tolerance(dtype, k, form.epilogue))
          << c10::toString(dtype) << ", draw " << draw;
    }
  }
}

}  // namespace
}  // namespace zenith::cuda
