// What the seeded random-program generators share (random_program.h and random_attention.h,
// random_convolution.h, random_projection.h): the program with its input draws, and the
// conditioning that keeps a program only where eager in its dtype is close to float64, so that a
// comparison with eager measures the kernels and not eager's own rounding.
#pragma once

#include <ATen/ATen.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace zenith::testing {

/// One random program with its inputs.
struct RandomProgram {
  std::uint64_t seed = 0;
  c10::ScalarType dtype = c10::ScalarType::Float;
  /// The inputs, in call order: fresh values of `dtype` on the requested device, some of them
  /// broadcasting against the others and some not contiguous (transposed or sliced views).
  std::vector<at::Tensor> inputs;
  /// Further draws of the inputs, kFreshInputDraws of them, each like `inputs` (dtype, sizes,
  /// strides, device, value ranges) with other values. A compiled program is called on `inputs`
  /// first (its capture) and then on each of these (its plan), and every call is compared with
  /// eager on the same values: a plan that replayed values captured at trace time fails.
  std::vector<std::vector<at::Tensor>> fresh_inputs;
  /// Runs the program eagerly on tensors like `inputs` and returns its 1 to 3 outputs.
  std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)> run;
  /// The inputs (dtype, sizes, layout, value range) and the ops, one per line, then the outputs:
  /// what a failure message needs to explain itself.
  std::string description;
  /// Whether the program holds a row reduction or normalization (sums are reordered by kernels).
  bool has_reduction = false;
  /// Whether a query of its attention sees no key (a bool mask hiding every key from it): eager's
  /// backends disagree on that row (tests/common/cudnn_attention_off.h), so it is compared with
  /// cuDNN's attention off.
  bool has_query_seeing_no_key = false;
};

/// Draws of fresh inputs per program, besides `inputs`.
constexpr std::size_t kFreshInputDraws = 2;

/// Most inputs a program takes, so that callers can dispatch to fixed-arity callables.
constexpr std::size_t kMaxRandomProgramInputs = 8;

/// Why eager in `program.dtype` is farther from eager in float64 than 2e-6 (float32), 5e-3
/// (float16) or 2e-2 (bfloat16) relative to its largest magnitude, on some draw of the inputs
/// (which must be on the CPU), or empty. Every generator keeps its programs within that bound.
std::string ill_conditioned(const RandomProgram& program);

/// For a generator: the first of up to 32 drafts (`draft(redraw)`, a program with its
/// inputs on the CPU, each drawing on from the seed's one stream) that is not ill_conditioned,
/// handed to `place` to move its inputs to the device. Throws, naming `generator`, the seed and
/// each draft's reason, when none is.
RandomProgram first_well_conditioned(const char* generator, std::uint64_t seed,
                                     const std::function<RandomProgram(int)>& draft,
                                     const std::function<void(RandomProgram&)>& place);

/// For a generator: a program of `dtype` for `seed` (has_reduction set) whose inputs
/// and each of its kFreshInputDraws fresh draws are `draw()`, in that order, running `run`.
RandomProgram program_of_draws(std::uint64_t seed, c10::ScalarType dtype,
                               const std::function<std::vector<at::Tensor>()>& draw,
                               std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)> run,
                               std::string description);

/// The call that rebuilds a generator's program, for failure messages:
/// "zenith::testing::<maker>(<seed>, at::kHalf, device)".
std::string rebuild_call(const char* maker, std::uint64_t seed, c10::ScalarType dtype);

/// The dtype the random-program tests give seed `seed` (float32, float16, bfloat16 in turn), so
/// that seed N is the same program in every suite.
c10::ScalarType dtype_for_seed(int seed);

}  // namespace zenith::testing
