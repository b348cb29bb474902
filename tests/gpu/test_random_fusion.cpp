// Seeded random programs of fusible ops (tests/common/random_program.h), compiled with fallback
// off and run on the GPU against eager: shapes, broadcasts, layouts, DAGs with shared values and
// several outputs, and row reductions with prologues and epilogues that nobody wrote by hand.
// Likewise seeded attention (random_attention.h), and convolution blocks (random_convolution.h) and
// projections (random_projection.h) as modules whose parameters change between calls, with their
// own tolerances below.
// Each program is called on three draws of its inputs (one signature): the capture, then the plan
// on fresh values, every call against eager on the same values.
// Labelled `gpu`. Built a second time with ZENITH_RANDOM_PROGRAMS_ON_CPU as a CPU test for CI:
// there the CPU plugin runs the groups, which checks fusion and partitioning (convex groups, step
// order) on the same programs. A failure names the seed, the dtype and the whole program, with the call that
// rebuilds it.
//
// Tolerances, as max |zenith - eager| / max |eager| per output. The generator keeps only well
// conditioned programs: eager in the dtype is within 2e-6 (float32), 5e-3 (float16) or 2e-2
// (bfloat16) of float64, so that what is compared is the kernels and not cancellation.
//  - float32, 1e-5: the kernel's formulas (expf, erff, tanhf, its own gelu and softplus) are not
//    ATen's, a few ulps apart per op, compounding over up to 12 ops and through ops with slopes
//    above 1 (exp, pow, divisions): about five times what eager itself is from float64 here.
//  - float32 with a row reduction, 1e-4: the kernel sums a row in another order (a tree over a
//    block, ATen's tree over its own), which moves a sum by ulps of its largest partial sums rather
//    than of the result; epilogues like x - mean, log_softmax's x - logsumexp, a variance's squared
//    deviations and a norm's division by the spread then amplify that difference further.
//  - float16 2e-2, bfloat16 8e-2: the kernel keeps intermediates in float32 and rounds once, at
//    the store, where eager rounds to the storage type (2^-11 and 2^-8 relative) after every op,
//    and those roundings compound over up to 12 ops. Since eager is within the generator's bound
//    of float64, the kernel is within about that bound of eager plus its own final rounding: the
//    tolerances leave a factor of four over the bound.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "common/cudnn_attention_off.h"
#include "common/pass_counter.h"
#include "common/random_attention.h"
#include "common/random_convolution.h"
#include "common/random_projection.h"
#include "common/random_program.h"
#include "common/seed_offset.h"
#include "common_relative_error.h"
#include "zenith/compile.h"

namespace zenith {
namespace {

using testing::pass_counter;
using testing::RandomProgram;
using testing::relative_error;

constexpr int kPrograms = 300;

#ifdef ZENITH_RANDOM_PROGRAMS_ON_CPU
const c10::Device kDevice(c10::kCPU);
constexpr const char* kBackend = "cpu";
#else
const c10::Device kDevice(c10::kCUDA);
constexpr const char* kBackend = "jit_cuda";
#endif

double tolerance(const RandomProgram& program) {
  switch (program.dtype) {
    case at::kHalf:
      return 2e-2;
    case at::kBFloat16:
      return 8e-2;
    default:
      return program.has_reduction ? 1e-4 : 1e-5;
  }
}

// The program's input draws in call order: `inputs` (the capture), then the fresh draws (the plan).
std::vector<std::vector<at::Tensor>> draws_of(const RandomProgram& program) {
  std::vector<std::vector<at::Tensor>> draws = {program.inputs};
  draws.insert(draws.end(), program.fresh_inputs.begin(), program.fresh_inputs.end());
  return draws;
}

struct CompiledRun {
  std::vector<std::vector<at::Tensor>> outputs;  // per call, in the order of draws_of
  CompileReport report;
  CacheStats stats;
};

template <std::size_t>
using TensorArgument = at::Tensor;

// zenith::compile takes callables of a fixed signature; a program takes 1 to 8 tensors.
template <std::size_t... I>
CompiledRun run_compiled(const RandomProgram& program, std::index_sequence<I...>) {
  auto forward = [run = program.run](TensorArgument<I>... inputs) -> std::vector<at::Tensor> {
    return run({inputs...});
  };
  CompileOptions options;
  options.fallback_to_eager = false;
  auto fast = compile(forward, options);
  // One signature, called on every draw: the capture, then the plan on fresh values.
  CompiledRun result;
  for (const auto& inputs : draws_of(program)) result.outputs.push_back(fast(inputs[I]...));
  result.report = fast.report();
  result.stats = fast.stats();
  return result;
}

// What differs between one call's outputs and eager's on the same inputs, or empty; `worst`
// keeps the largest error / tolerance.
std::string compare_call(const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& want, double tol,
                         double& worst) {
  if (got.size() != want.size()) return "number of outputs differs from eager\n";
  std::string problems;
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (got[i].sizes() != want[i].sizes() || got[i].scalar_type() != want[i].scalar_type()) {
      problems += "output " + std::to_string(i) + ": " + c10::toString(got[i].scalar_type()) +
                  c10::str(got[i].sizes()) + ", eager " + c10::toString(want[i].scalar_type()) +
                  c10::str(want[i].sizes()) + "\n";
      continue;
    }
    const double error = relative_error(got[i].to(at::kFloat), want[i].to(at::kFloat));
    worst = std::max(worst, error / tol);
    if (!(error <= tol)) {  // NaN fails too
      problems += "output " + std::to_string(i) + ": error " + std::to_string(error) + " > tolerance " +
                  std::to_string(tol) + "\n";
    }
  }
  return problems;
}

template <std::size_t N = 1>
CompiledRun run_with_arity(const RandomProgram& program) {
  if constexpr (N > testing::kMaxRandomProgramInputs) {
    throw std::runtime_error("the program takes more than kMaxRandomProgramInputs inputs");
  } else {
    if (program.inputs.size() == N) return run_compiled(program, std::make_index_sequence<N>{});
    return run_with_arity<N + 1>(program);
  }
}

// A program whose first input is the call's tensor and the others its weights, biases and
// statistics, as a module: those registered as its parameters, forward(x) running the program.
struct ProgramModuleImpl : torch::nn::Module {
  explicit ProgramModuleImpl(const RandomProgram& program) : run(program.run) {
    for (std::size_t i = 1; i < program.inputs.size(); ++i) {
      weights.push_back(register_parameter("p" + std::to_string(i), program.inputs[i].clone(), /*requires_grad=*/false));
    }
  }
  at::Tensor forward(at::Tensor x) {
    std::vector<at::Tensor> args = {x};
    args.insert(args.end(), weights.begin(), weights.end());
    return run(args).at(0);
  }
  std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)> run;
  std::vector<at::Tensor> weights;
};
TORCH_MODULE(ProgramModule);

// The program compiled as a module. Before each call its parameters are updated in place to that
// draw's values, as an optimizer step or a checkpoint load updates them: the plan must read them
// live and compute again what it derived from them (channels-last weights, concatenated ones).
CompiledRun run_as_module(const RandomProgram& program) {
  ProgramModule module(program);
  CompileOptions options;
  options.fallback_to_eager = false;
  auto fast = compile(module, options);
  CompiledRun result;
  for (const auto& inputs : draws_of(program)) {
    {
      torch::NoGradGuard no_grad;
      for (std::size_t i = 1; i < inputs.size(); ++i) module->weights[i - 1].copy_(inputs[i]);
    }
    result.outputs.push_back({fast(inputs[0])});
  }
  result.report = fast.report();
  result.stats = fast.stats();
  return result;
}

std::int64_t count(const std::map<std::string, std::int64_t>& counts, const std::string& key) {
  auto it = counts.find(key);
  return it == counts.end() ? 0 : it->second;
}

// Groups the fusion pass proposed for this signature.
std::int64_t fused_groups(const CompileReport& report) { return pass_counter(report, "fuse_elementwise", "groups"); }

TEST(RandomFusion, SeededProgramsMatchEager) {
  if (kDevice.is_cuda() && !torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::NoGradGuard no_grad;
  int failures = 0, programs_fused = 0, programs_declined = 0;
  std::int64_t groups = 0, jit_nodes = 0, declined_nodes = 0;
  std::map<std::string, double> worst;  // dtype -> largest error / tolerance
  const int first = testing::first_seed();
  for (int seed = first; seed < first + kPrograms; ++seed) {
    const auto dtype = testing::dtype_for_seed(seed);
    const std::string where = "seed " + std::to_string(seed) + ", " + c10::toString(dtype) + "\n";
    RandomProgram program;
    CompiledRun got;
    try {
      program = testing::make_random_program(static_cast<std::uint64_t>(seed), dtype, kDevice);
      got = run_with_arity(program);
    } catch (const std::exception& error) {
      ++failures;
      ADD_FAILURE() << where << program.description << error.what();
      continue;
    }
    const double tol = tolerance(program);
    const auto draws = draws_of(program);
    std::string problems;
    for (std::size_t call = 0; call < draws.size(); ++call) {
      auto differences = compare_call(got.outputs[call], program.run(draws[call]), tol, worst[c10::toString(dtype)]);
      if (!differences.empty()) {
        problems += (call == 0 ? "call 0 (the capture, on `inputs`):\n"
                               : "call " + std::to_string(call) + " (the plan, on fresh draw " +
                                     std::to_string(call) + " of the inputs):\n") +
                    differences;
      }
    }
    if (got.stats.misses != 1 || got.stats.hits != static_cast<std::int64_t>(draws.size()) - 1) {
      problems += "expected one capture and " + std::to_string(draws.size() - 1) + " plan calls, got " +
                  std::to_string(got.stats.misses) + " misses and " + std::to_string(got.stats.hits) + " hits\n";
    }
    bool failed = !problems.empty();

    const auto& report = got.report;
    const std::int64_t fused = fused_groups(report);
    const std::int64_t on_jit = count(report.nodes_per_backend, kBackend);
    const std::int64_t on_torch = count(report.nodes_per_backend, "torch_gpu");
    groups += fused;
    jit_nodes += on_jit;
    declined_nodes += on_torch;
    programs_fused += fused > 0;
    programs_declined += on_torch > 0;
    if (fused > 0 && on_jit == 0) {
      failed = true;
      problems += "the fusion pass made " + std::to_string(fused) + " groups, yet " + kBackend + " ran no node\n";
    }
    if (failed) {
      ++failures;
      ADD_FAILURE() << where << problems << program.description << report.to_string();
    }
  }
  std::printf(
      "random fusion: %d programs run, %d with fusion groups (%lld groups), %lld nodes on the backend under test; "
      "%d programs with nodes the JIT declined (%lld nodes on torch_gpu); %d failures\n",
      kPrograms, programs_fused, static_cast<long long>(groups), static_cast<long long>(jit_nodes), programs_declined,
      static_cast<long long>(declined_nodes), failures);
  for (const auto& [dtype, ratio] : worst)
    std::printf("  %s: largest error %.3f of the tolerance\n", dtype.c_str(), ratio);
  // Most programs have something to fuse; fewer groups would mean that the fusion pass stopped
  // proposing them and the comparisons above checked eager against the PyTorch backend.
  EXPECT_GE(programs_fused, kPrograms / 2);
}

// Tolerances for attention, as max |zenith - eager| / max |eager|. The generator keeps logits of
// the order of 1 to 4 (tests/common/random_attention.h), so a probability moves by about the
// rounding of its logit:
//  - float32, 1e-4: the fused kernels and ours sum the keys in another order and take exp2 of
//    log2-scaled scores; a few ulps of each logit and of each sum.
//  - float16 1e-2, bfloat16 5e-2: eager written out rounds the scores and the probabilities to
//    the dtype (2^-11 and 2^-8 relative, of logits up to about 4), where the fused kernels keep
//    them in float32; the result itself is rounded once.
double attention_tolerance(c10::ScalarType dtype) {
  return dtype == at::kHalf ? 1e-2 : dtype == at::kBFloat16 ? 5e-2 : 1e-4;
}

// What one family of seeded programs came to: failures, and per tally (a question about a
// program's compile report) how many programs it held for.
struct FamilyRun {
  int failures = 0;
  std::map<std::string, int> programs;
};

using Tally = std::pair<std::string, std::function<bool(const CompileReport&)>>;

// Each seed's program of `make` compiled with fallback off, called on every draw of its inputs
// (one capture, then the plan), every call compared with eager within `tolerance`; a summary line
// naming `family` and each tally, and each dtype's largest error.
// With `as_module`, a program runs as a module whose parameters change between calls
// (run_as_module); otherwise as a callable of all its inputs.
FamilyRun run_family(const char* family, int programs, const std::function<RandomProgram(int)>& make,
                     const std::function<double(const RandomProgram&)>& tolerance, const std::vector<Tally>& tallies,
                     bool as_module = false) {
  FamilyRun result;
  std::map<std::string, double> worst;  // dtype -> largest error / tolerance
  const int first = testing::first_seed();
  for (int seed = first; seed < first + programs; ++seed) {
    const std::string where = "seed " + std::to_string(seed) + ", " + c10::toString(testing::dtype_for_seed(seed)) + "\n";
    RandomProgram program;
    CompiledRun got;
    // Zenith's attention kernel gives a query that sees no key 0; so do eager's math and
    // memory-efficient backends, while its cuDNN backend does not (cudnn_attention_off.h):
    // both runs of such a program go without cuDNN's attention, so that the row is compared
    // with eager's 0 wherever Zenith runs it.
    std::optional<testing::CudnnAttentionOff> cudnn_attention_off;
    try {
      program = make(seed);
      if (program.has_query_seeing_no_key && kDevice.is_cuda()) cudnn_attention_off.emplace();
      got = as_module ? run_as_module(program) : run_with_arity(program);
    } catch (const std::exception& error) {
      ++result.failures;
      ADD_FAILURE() << where << program.description << error.what();
      continue;
    }
    const auto draws = draws_of(program);
    std::string problems;
    for (std::size_t call = 0; call < draws.size(); ++call) {
      auto differences = compare_call(got.outputs[call], program.run(draws[call]), tolerance(program),
                                      worst[c10::toString(program.dtype)]);
      if (!differences.empty()) problems += "call " + std::to_string(call) + ":\n" + differences;
    }
    if (got.stats.misses != 1) problems += "expected one capture, got " + std::to_string(got.stats.misses) + "\n";
    for (const auto& [name, holds] : tallies) result.programs[name] += holds(got.report);
    if (!problems.empty()) {
      ++result.failures;
      ADD_FAILURE() << where << problems << program.description << got.report.to_string();
    }
  }
  std::printf("%s: %d programs run, %d failures;", family, programs, result.failures);
  for (const auto& [name, count] : result.programs) std::printf(" %s: %d;", name.c_str(), count);
  std::printf("\n");
  for (const auto& [dtype, ratio] : worst) std::printf("  %s: largest error %.3f of the tolerance\n", dtype.c_str(), ratio);
  return result;
}

constexpr int kAttentionPrograms = 150;

// Seeded attention in the forms models write it (tests/common/random_attention.h): on CUDA the
// written-out forms fuse into one scaled_dot_product_attention, repeated key-value heads are read
// as they are, and a decode step's few queries run on the JIT attention kernel; on the CPU the
// same programs check capture and replay with fresh masks. Every call is compared with eager.
TEST(RandomFusion, SeededAttentionMatchesEager) {
  if (kDevice.is_cuda() && !torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::NoGradGuard no_grad;
  const auto run = run_family(
      "random attention", kAttentionPrograms,
      [](int seed) { return testing::make_random_attention(static_cast<std::uint64_t>(seed), testing::dtype_for_seed(seed), kDevice); },
      [](const RandomProgram& program) { return attention_tolerance(program.dtype); },
      {{"fused from the written-out form",
        [](const CompileReport& r) { return pass_counter(r, "fuse_attention", "fused") > 0; }},
       {"reading repeated key-value heads as they are",
        [](const CompileReport& r) { return pass_counter(r, "grouped_query_attention", "ungrouped") > 0; }},
       {"with nodes on the backend under test",
        [](const CompileReport& r) { return count(r.nodes_per_backend, kBackend) > 0; }}});
  EXPECT_EQ(run.failures, 0);
  // The rewrites run on CUDA only: there, fewer would mean a pass stopped matching the forms
  // models write and the comparisons above checked little of it.
  if (kDevice.is_cuda()) {
    EXPECT_GE(run.programs.at("fused from the written-out form"), kAttentionPrograms / 10);
    EXPECT_GE(run.programs.at("reading repeated key-value heads as they are"), kAttentionPrograms / 20);
    EXPECT_GE(run.programs.at("with nodes on the backend under test"), kAttentionPrograms / 4);
  }
}

constexpr int kConvolutionPrograms = 120;

// Seeded convolution blocks (tests/common/random_convolution.h) as modules whose weights and
// statistics change in place between calls: on CUDA the convolutions run channels-last where the
// result allows (their weights' copies kept, and made again after each change), batch norms
// become arithmetic or, before a ReLU, fold into the convolution (passes/convolution_epilogue.h),
// and what follows a convolution fuses; on the CPU the same programs check
// capture and replay. TF32 is off for the test, in eager and in Zenith alike (both follow PyTorch's
// flags): otherwise a channels-last convolution and an NCHW one would round their inputs to TF32
// in different algorithms, and float32 would be compared at TF32's precision.
TEST(RandomFusion, SeededConvolutionsMatchEager) {
  if (kDevice.is_cuda() && !torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::NoGradGuard no_grad;
  auto& context = at::globalContext();
  const bool tf32 = context.allowTF32CuDNN();
  context.setAllowTF32CuDNN(false);
  const auto run = run_family(
      "random convolutions", kConvolutionPrograms,
      [](int seed) { return testing::make_random_convolution(static_cast<std::uint64_t>(seed), testing::dtype_for_seed(seed), kDevice); },
      tolerance,
      {{"with batch norms as arithmetic or folded",
        [](const CompileReport& r) {
          return pass_counter(r, "decompose_batch_norm", "decomposed") + pass_counter(r, "fuse_convolution_epilogue", "fused") > 0;
        }},
       {"with a convolution, batch norm and ReLU as one op",
        [](const CompileReport& r) { return pass_counter(r, "fuse_convolution_epilogue", "fused") > 0; }},
       {"with nodes on the backend under test",
        [](const CompileReport& r) { return count(r.nodes_per_backend, kBackend) > 0; }}},
      /*as_module=*/true);
  context.setAllowTF32CuDNN(tf32);
  EXPECT_EQ(run.failures, 0);
  if (kDevice.is_cuda()) {
    EXPECT_GE(run.programs.at("with batch norms as arithmetic or folded"), kConvolutionPrograms / 2);
    EXPECT_GE(run.programs.at("with a convolution, batch norm and ReLU as one op"), 1);
    EXPECT_GE(run.programs.at("with nodes on the backend under test"), kConvolutionPrograms / 2);
  }
}

constexpr int kProjectionPrograms = 150;

// Tolerances for projections: a product's algorithm sums in its own order, cuBLASLt's or the
// matrix-vector kernel's against eager's cuBLAS; the activation, combination and norm after it
// keep float32 in the fused kernels where eager rounds after each op. float32 1e-4 (TF32 off, as
// for convolutions); float16 2e-2 and bfloat16 8e-2, as for the random programs.
double projection_tolerance(const RandomProgram& program) {
  return program.dtype == at::kHalf ? 2e-2 : program.dtype == at::kBFloat16 ? 8e-2 : 1e-4;
}

// Seeded projections (tests/common/random_projection.h) as modules whose weights change in place
// between calls: on CUDA siblings become one product over their weights concatenated (kept, and
// concatenated again after each change), products run on cuBLASLt with their epilogues or, for a
// decode step's few rows, on the matrix-vector kernel; on the CPU the same programs check capture
// and replay.
TEST(RandomFusion, SeededProjectionsMatchEager) {
  if (kDevice.is_cuda() && !torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::NoGradGuard no_grad;
  auto& context = at::globalContext();
  const bool tf32 = context.allowTF32CuBLAS();
  context.setAllowTF32CuBLAS(false);
  const auto run = run_family(
      "random projections", kProjectionPrograms,
      [](int seed) { return testing::make_random_projection(static_cast<std::uint64_t>(seed), testing::dtype_for_seed(seed), kDevice); },
      projection_tolerance,
      {{"with sibling products as one",
        [](const CompileReport& r) { return pass_counter(r, "concatenate_sibling_products", "concatenated") > 0; }},
       {"with nodes on the backend under test",
        [](const CompileReport& r) { return count(r.nodes_per_backend, kBackend) > 0; }}},
      /*as_module=*/true);
  context.setAllowTF32CuBLAS(tf32);
  EXPECT_EQ(run.failures, 0);
  if (kDevice.is_cuda()) {
    EXPECT_GE(run.programs.at("with sibling products as one"), kProjectionPrograms / 10);
    EXPECT_GE(run.programs.at("with nodes on the backend under test"), kProjectionPrograms / 2);
  }
}

}  // namespace
}  // namespace zenith
