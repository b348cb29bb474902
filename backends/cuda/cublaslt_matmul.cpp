#include "backends/cuda/cublaslt_matmul.h"

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <utility>
#include <vector>

#include <cublasLt.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "backends/cuda/matmul_tile_choice.h"
#include "backends/cuda/matmul_workspace_bound.h"
#include "backends/cuda/matrix_geometry.h"

namespace zenith::cuda {
namespace {

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

cudaDataType_t cuda_type(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::ScalarType::Half: return CUDA_R_16F;
    case c10::ScalarType::BFloat16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
  }
}


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

// A tensor the program reads or writes, checked against what the program was planned for.
const DLTensor& operand(const std::vector<const DLTensor*>& tensors, int index, const MatmulProgram& program,
                        int rank, const char* what) {
  if (index < 0 || static_cast<std::size_t>(index) >= tensors.size() || tensors[index] == nullptr) {
    throw std::runtime_error(fmt::format("{}: {} (tensor {}) was not passed", program.name, what, index));
  }
  const DLTensor& t = *tensors[index];
  if (!has_dtype(t, program.dtype)) {
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

std::uint64_t type_bytes(cudaDataType_t type) { return type == CUDA_R_32F ? 4 : 2; }

std::uint64_t matrix_bytes(const Problem& problem, const LtMatrix& m) {
  return m.rows * m.cols * static_cast<std::uint64_t>(problem.batch) * type_bytes(problem.type);
}

std::uint64_t workspace_budget(const Problem& problem) {
  return matmul_workspace_bound(matrix_bytes(problem, problem.out), matrix_bytes(problem, problem.first),
                                matrix_bytes(problem, problem.second));
}

// One of `algo`'s configuration attributes, as wide as cuBLASLt documents it, or nullopt.
template <typename T>
std::optional<T> config_value(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attribute) {
  T value{};
  std::size_t written = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(&algo, attribute, &value, sizeof(value), &written) != CUBLAS_STATUS_SUCCESS ||
      written != sizeof(value)) {
    return std::nullopt;
  }
  return value;
}

std::optional<std::int32_t> split_k(const cublasLtMatmulAlgo_t& algo) {
  return config_value<std::int32_t>(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM);
}

// The alignment D's preference states: the bias's, where that is less (see heuristic_picks).
std::uint32_t d_alignment(const Problem& problem) { return std::min(problem.out.alignment, problem.bias_alignment); }

// Whether `algo` needs no more alignment of A, B, C and D than the problem's pointers are known to
// have. The heuristic's own picks are filtered by the same preferences; an algorithm reconfigured
// by hand is not, and cublasLtMatmulAlgoCheck cannot see the pointers (a query that fails counts
// as a refusal).
bool within_alignment(const cublasLtMatmulAlgo_t& algo, const Problem& problem) {
  const std::pair<cublasLtMatmulAlgoCapAttributes_t, std::uint32_t> needs[] = {
      {CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_A_BYTES, problem.first.alignment},
      {CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_B_BYTES, problem.second.alignment},
      {CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_C_BYTES, problem.out.alignment},
      {CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_D_BYTES, d_alignment(problem)}};
  for (const auto& [attribute, known] : needs) {
    std::uint32_t needed = 0;
    std::size_t written = 0;
    if (cublasLtMatmulAlgoCapGetAttribute(&algo, attribute, &needed, sizeof(needed), &written) != CUBLAS_STATUS_SUCCESS ||
        written != sizeof(needed) || needed > known) {
      return false;
    }
  }
  return true;
}

// `algo` with the workspace it needs, where cuBLASLt accepts it for these descriptors within
// `budget` and these pointers' alignment: an algorithm not straight from the heuristic
// (reconfigured, or chosen for other sizes) is only used so.
std::optional<cublasLtMatmulHeuristicResult_t> accepted(cublasLtHandle_t handle, const Problem& problem,
                                                        const CachedMatmul& cached, const cublasLtMatmulAlgo_t& algo,
                                                        std::uint64_t budget) {
  cublasLtMatmulHeuristicResult_t checked{};
  checked.algo = algo;
  if (cublasLtMatmulAlgoCheck(handle, cached.desc.get(), cached.first.get(), cached.second.get(), cached.out.get(),
                              cached.out.get(), &checked.algo, &checked) != CUBLAS_STATUS_SUCCESS ||
      checked.workspaceSize > budget || !within_alignment(checked.algo, problem)) {
    return std::nullopt;
  }
  return checked;
}

// The heuristic's pick with fewer split-K splits, the most whose partial sums fit `budget`, when
// cuBLASLt accepts one for these descriptors and these pointers' alignment. Measured on the H200
// (BERT-base b1 float32) this keeps the pick's tile and most of its speed: a heuristic query under
// a smaller offer instead returns a kernel without split-K, up to 2.2 times as slow (the
// feed-forward's second product, 56 against 25 us; docs/performance.md).
std::optional<cublasLtMatmulHeuristicResult_t> fewer_splits(cublasLtHandle_t handle, const Problem& problem,
                                                             const CachedMatmul& cached,
                                                             const cublasLtMatmulHeuristicResult_t& pick,
                                                             std::uint64_t budget) {
  const auto splits = split_k(pick.algo);
  if (!splits) return std::nullopt;
  for (std::int32_t s = *splits - 1; s >= 2; --s) {
    auto algo = pick.algo;
    if (cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &s, sizeof(s)) !=
        CUBLAS_STATUS_SUCCESS) {
      continue;
    }
    if (auto checked = accepted(handle, problem, cached, algo, budget)) return checked;
  }
  return std::nullopt;
}

// The heuristic's first `count` algorithms, best first, with at most `max_workspace` on offer;
// those it marks unusable (a result's state, which cuBLASLt asks to check) left out.
std::vector<cublasLtMatmulHeuristicResult_t> heuristic_picks(cublasLtHandle_t handle, const Problem& problem,
                                                             const CachedMatmul& cached, std::uint64_t max_workspace,
                                                             int count) {
  cublasLtMatmulPreference_t raw_preference = nullptr;
  check(cublasLtMatmulPreferenceCreate(&raw_preference), "cublasLtMatmulPreferenceCreate");
  Preference preference(raw_preference);
  set<std::uint64_t>(raw_preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, max_workspace);
  set<std::uint32_t>(raw_preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, problem.first.alignment);
  set<std::uint32_t>(raw_preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, problem.second.alignment);
  set<std::uint32_t>(raw_preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, problem.out.alignment);
  // No preference names the bias's alignment; D's is lowered to it so that an algorithm assuming
  // more of the epilogue's pointers is never picked (PyTorch passes the bias's there too).
  set<std::uint32_t>(raw_preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, d_alignment(problem));

  std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<std::size_t>(count));
  int found = 0;
  check(cublasLtMatmulAlgoGetHeuristic(handle, cached.desc.get(), cached.first.get(), cached.second.get(),
                                       cached.out.get(), cached.out.get(), raw_preference, count, results.data(), &found),
        "cublasLtMatmulAlgoGetHeuristic");
  results.resize(static_cast<std::size_t>(found));
  results.erase(std::remove_if(results.begin(), results.end(),
                               [](const cublasLtMatmulHeuristicResult_t& r) { return r.state != CUBLAS_STATUS_SUCCESS; }),
                results.end());
  return results;
}

// The heuristic's first algorithm with at most `max_workspace` on offer.
std::optional<cublasLtMatmulHeuristicResult_t> heuristic_pick(cublasLtHandle_t handle, const Problem& problem,
                                                              const CachedMatmul& cached, std::uint64_t max_workspace) {
  const auto picks = heuristic_picks(handle, problem, cached, max_workspace, 1);
  if (picks.empty()) return std::nullopt;
  return picks.front();
}

// What the tile choice reads of a candidate; one whose configuration cannot be read gets no tile,
// which the choice never takes (and which keeps the heuristic's first pick, when it is the first).
AlgorithmSummary summary_of(const cublasLtMatmulAlgo_t& algo) {
  const auto id = config_value<std::int32_t>(algo, CUBLASLT_ALGO_CONFIG_ID);
  const auto tile = config_value<std::uint32_t>(algo, CUBLASLT_ALGO_CONFIG_TILE_ID);
  const auto splits = split_k(algo);
  if (!id || !tile || !splits) return {0, CUBLASLT_MATMUL_TILE_UNDEFINED, 1};
  return {static_cast<std::uint32_t>(*id), *tile, *splits};
}

// Candidates the heuristic lists for one size, for a product whose columns vary: enough to reach
// the narrower tiles of its first pick's algorithm (second to eighth in the H200's sweep).
constexpr int kVaryingColumnsCandidates = 8;

// For a product whose output's columns vary between launches, the heuristic's pick narrower along
// them where it lists one (matmul_tile_choice.h), else its first; `narrower` says which.
std::optional<cublasLtMatmulHeuristicResult_t> varying_columns_pick(cublasLtHandle_t handle, const Problem& problem,
                                                                    const CachedMatmul& cached, bool& narrower) {
  const auto picks = heuristic_picks(handle, problem, cached, kMaxMatmulWorkspaceBytes, kVaryingColumnsCandidates);
  if (picks.empty()) return std::nullopt;
  std::vector<AlgorithmSummary> summaries;
  for (const auto& pick : picks) summaries.push_back(summary_of(pick.algo));
  const auto chosen = narrower_along_varying_columns(summaries);
  narrower = chosen != 0;
  return picks[chosen];
}

// The descriptors of one problem, its algorithm not yet chosen.
std::unique_ptr<CachedMatmul> describe(const Problem& problem) {
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
  return cached;
}

// The algorithm chosen for this product at another column count, where cuBLASLt accepts it for
// these sizes within the workspace budget and these pointers' alignment: no heuristic query, which
// on the H200 costs a new sequence length's first call more than its kernels at short lengths
// (docs/performance.md), and one kernel whose time grows with the columns in the tile's fine steps.
std::unique_ptr<CachedMatmul> reuse_algorithm(cublasLtHandle_t handle, const Problem& problem,
                                              const cublasLtMatmulAlgo_t& algo) {
  auto cached = describe(problem);
  const auto checked = accepted(handle, problem, *cached, algo, workspace_budget(problem));
  if (!checked) return nullptr;
  cached->algo = checked->algo;
  cached->workspace_bytes = checked->workspaceSize;
  return cached;
}

// `narrower`, given, says whether the choice for varying columns took a narrower tile.
std::unique_ptr<CachedMatmul> choose_algorithm(cublasLtHandle_t handle, const Problem& problem, bool columns_vary,
                                               bool* narrower = nullptr) {
  auto cached = describe(problem);

  // The heuristic's first pick with cuBLAS's recommended offer (where the output's columns vary, its
  // pick narrower along them: matmul_tile_choice.h); when its workspace is over the budget
  // (matmul_workspace_bound.h), the same kernel with fewer splits, else the heuristic's pick under
  // the budget, else (no algorithm fits) the first pick: a larger peak, never a failed product.
  bool took_narrower = false;
  const auto first = columns_vary ? varying_columns_pick(handle, problem, *cached, took_narrower)
                                  : heuristic_pick(handle, problem, *cached, kMaxMatmulWorkspaceBytes);
  if (!first) {
    throw std::runtime_error(fmt::format("cublasLtMatmulAlgoGetHeuristic found no algorithm for {}", problem.key()));
  }
  const std::uint64_t budget = workspace_budget(problem);
  auto chosen = first;
  if (first->workspaceSize > budget) {
    chosen = fewer_splits(handle, problem, *cached, *first, budget);
    if (!chosen) {
      chosen = heuristic_pick(handle, problem, *cached, budget);
      if (chosen) took_narrower = false;  // another kernel, whatever its tile
    }
    if (!chosen) chosen = first;
  }
  cached->algo = chosen->algo;
  cached->workspace_bytes = chosen->workspaceSize;
  if (narrower != nullptr) *narrower = took_narrower;
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
  if (!is_packed_vector(dims, n) || bias.device.device_id != device) {
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

struct MatmulHistory::State {
  std::uint64_t first_columns = 0;  // 0 until the product's first launch
  std::optional<cublasLtMatmulAlgo_t> varying_algorithm;  // its choice at its second column count
};

MatmulHistory::MatmulHistory() : state_(std::make_unique<State>()) {}
MatmulHistory::~MatmulHistory() = default;

struct CublasLtMatmul::State {
  cublasLtHandle_t handle = nullptr;
  mutable std::mutex mutex;  // guards everything below and the MatmulHistory of every launch
  // By Problem::key() and whether the choice is for varying columns.
  std::map<std::pair<std::string, bool>, std::unique_ptr<CachedMatmul>> cache;
  std::size_t varying_choices = 0;
  std::size_t narrower = 0;
  std::size_t reused = 0;

  CachedMatmul& cached(const Problem& problem, MatmulHistory* history) {
    std::lock_guard<std::mutex> lock(mutex);
    const bool vary = history != nullptr && columns_vary(*history->state_, problem.out.cols);
    auto key = std::make_pair(problem.key(), vary);
    auto it = cache.find(key);
    if (it == cache.end()) {
      auto chosen = vary ? choose_varying(problem, *history->state_) : choose_algorithm(handle, problem, false);
      it = cache.emplace(std::move(key), std::move(chosen)).first;
    }
    if (vary && !history->state_->varying_algorithm) history->state_->varying_algorithm = it->second->algo;
    return *it->second;
  }

  // Whether the product has run with another column count before; its first launch records its own.
  static bool columns_vary(MatmulHistory::State& history, std::uint64_t columns) {
    if (history.first_columns == 0) history.first_columns = columns;
    return history.first_columns != columns;
  }

  // A varying product's new problem: the algorithm it chose at its second column count where
  // cuBLASLt accepts it for these sizes, else the choice for varying columns (matmul_tile_choice.h).
  std::unique_ptr<CachedMatmul> choose_varying(const Problem& problem, const MatmulHistory::State& history) {
    ++varying_choices;
    if (history.varying_algorithm) {
      if (auto cached = reuse_algorithm(handle, problem, *history.varying_algorithm)) {
        ++reused;
        return cached;
      }
    }
    bool took_narrower = false;
    auto cached = choose_algorithm(handle, problem, true, &took_narrower);
    narrower += took_narrower ? 1 : 0;
    return cached;
  }

  void enqueue(const Problem& problem, MatmulHistory* history, void* out, cudaStream_t stream,
               const std::function<void*(std::size_t)>& allocate, const std::function<void(void*)>& release) {
    CachedMatmul& matmul = cached(problem, history);
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

std::size_t CublasLtMatmul::varying_column_choices() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->varying_choices;
}

std::size_t CublasLtMatmul::narrower_tile_choices() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->narrower;
}

std::size_t CublasLtMatmul::reused_algorithms() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->reused;
}

void CublasLtMatmul::run(const MatmulProgram& program, const std::vector<const DLTensor*>& inputs,
                         const std::vector<const DLTensor*>& outputs, cudaStream_t stream,
                         const std::function<void*(std::size_t)>& allocate_workspace,
                         const std::function<void(void*)>& free_workspace, MatmulHistory* history) const {
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
    state_->enqueue(zero_inner_problem(problem, zeros.data(), address(out), rows, n, bytes), nullptr, address(out),
                    stream, allocate_workspace, free_workspace);
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
  state_->enqueue(problem, history, address(out), stream, allocate_workspace, free_workspace);
}

}  // namespace zenith::cuda
