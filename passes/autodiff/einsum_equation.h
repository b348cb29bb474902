// An einsum equation with every subscript spelled out: what the einsum derivative rule
// (rules_matrix.cpp) rewrites into the equations of the gradients.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zenith::autodiff {

/// One subscript letter per dimension, for every operand and for the result. An ellipsis becomes
/// letters of its own, aligned from the right as einsum broadcasts them; an equation without `->`
/// gets einsum's implicit result (the ellipsis's dimensions, then every letter used once, in
/// alphabetical order).
struct EinsumEquation {
  std::vector<std::string> operands;
  std::string result;
};

/// Parses `equation` for operands of the given ranks. Throws zenith::Error naming the equation
/// when it does not fit them (a count or rank that differs, a character that is not a letter).
EinsumEquation parse_einsum_equation(const std::string& equation, const std::vector<std::int64_t>& ranks);

/// The gradient of operand `k`: the equation that multiplies the result's gradient by the other
/// operands (`result,others...->kept`, where `kept` is operand k's subscript less the letters no
/// one else names), and where each of those lone letters sits in operand k's subscript (the
/// gradient is broadcast along them). Throws zenith::Error for a letter repeated within operand k
/// (a diagonal), which has no rule.
struct EinsumGradient {
  std::string equation;
  std::vector<std::int64_t> lone_dims;  // ascending positions in operand k
};
EinsumGradient einsum_gradient(const EinsumEquation& equation, std::size_t k);

}  // namespace zenith::autodiff
