#include "common/seeded_program.h"

#include <stdexcept>

#include <c10/util/StringUtil.h>

#include "common_relative_error.h"

namespace zenith::testing {
namespace {

// How far eager in `dtype` may be from float64 for a program to be kept (see the header).
double conditioning_bound(c10::ScalarType dtype) {
  return dtype == at::kHalf ? 5e-3 : dtype == at::kBFloat16 ? 2e-2 : 2e-6;
}

// Why eager in the program's dtype is too far from float64 on the CPU on these inputs, or empty.
std::string ill_conditioned(const RandomProgram& program, const std::vector<at::Tensor>& inputs) {
  std::vector<at::Tensor> wide;
  for (const auto& input : inputs) wide.push_back(input.to(at::kDouble));
  const auto exact = program.run(wide);
  const auto eager = program.run(inputs);
  for (std::size_t i = 0; i < exact.size(); ++i) {
    const double error = relative_error(eager[i].to(at::kDouble), exact[i]);
    // Written so that NaN (a non-finite output) counts as too far.
    if (!(error <= conditioning_bound(program.dtype))) {
      return "output " + std::to_string(i) + " of eager is " + c10::str(error) + " from float64";
    }
  }
  return "";
}

}  // namespace

std::string ill_conditioned(const RandomProgram& program) {
  auto why = ill_conditioned(program, program.inputs);
  for (std::size_t draw = 0; why.empty() && draw < program.fresh_inputs.size(); ++draw) {
    why = ill_conditioned(program, program.fresh_inputs[draw]);
    if (!why.empty()) why += " on fresh draw " + std::to_string(draw + 1) + " of the inputs";
  }
  return why;
}

RandomProgram first_well_conditioned(const char* generator, std::uint64_t seed,
                                     const std::function<RandomProgram(int)>& draft,
                                     const std::function<void(RandomProgram&)>& place) {
  std::string rejected;
  for (int redraw = 0; redraw < 32; ++redraw) {
    auto program = draft(redraw);
    const auto why = ill_conditioned(program);
    if (!why.empty()) {
      rejected += "\n  draw " + std::to_string(redraw) + ": " + why;
      continue;
    }
    place(program);
    return program;
  }
  throw std::runtime_error(std::string(generator) + ": no well-conditioned program for seed " + std::to_string(seed) +
                           rejected);
}

RandomProgram program_of_draws(std::uint64_t seed, c10::ScalarType dtype,
                               const std::function<std::vector<at::Tensor>()>& draw,
                               std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)> run,
                               std::string description) {
  RandomProgram program;
  program.seed = seed;
  program.dtype = dtype;
  program.has_reduction = true;
  program.inputs = draw();
  for (std::size_t k = 0; k < kFreshInputDraws; ++k) program.fresh_inputs.push_back(draw());
  program.run = std::move(run);
  program.description = std::move(description);
  return program;
}

std::string rebuild_call(const char* maker, std::uint64_t seed, c10::ScalarType dtype) {
  const char* constant = dtype == at::kHalf ? "at::kHalf" : dtype == at::kBFloat16 ? "at::kBFloat16" : "at::kFloat";
  return std::string("zenith::testing::") + maker + "(" + std::to_string(seed) + ", " + constant + ", device)";
}

c10::ScalarType dtype_for_seed(int seed) {
  const c10::ScalarType dtypes[] = {at::kFloat, at::kHalf, at::kBFloat16};
  return dtypes[seed % 3];
}

}  // namespace zenith::testing
