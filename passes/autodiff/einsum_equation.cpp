#include "passes/autodiff/einsum_equation.h"

#include <algorithm>
#include <cctype>
#include <map>

#include <fmt/format.h>

#include "zenith/error.h"

namespace zenith::autodiff {
namespace {

constexpr const char* kEllipsis = "...";

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts(1);
  for (char ch : text) {
    if (ch == separator) parts.emplace_back();
    else parts.back() += ch;
  }
  return parts;
}

std::string without_spaces(const std::string& text) {
  std::string kept;
  for (char ch : text) {
    if (!std::isspace(static_cast<unsigned char>(ch))) kept += ch;
  }
  return kept;
}

// Letters the equation does not use, in einsum's order (upper case first), for an ellipsis.
std::string unused_letters(const std::string& equation, std::size_t count) {
  std::string letters;
  for (char ch = 'A'; ch <= 'z' && letters.size() < count; ++ch) {
    if (std::isalpha(static_cast<unsigned char>(ch)) && equation.find(ch) == std::string::npos) letters += ch;
  }
  if (letters.size() < count) {
    throw Error(fmt::format("einsum '{}': too few letters left to name its ellipsis's {} dimensions", equation, count));
  }
  return letters;
}

void check_letters(const std::string& equation, const std::string& subscript) {
  for (char ch : subscript) {
    if (!std::isalpha(static_cast<unsigned char>(ch))) {
      throw Error(fmt::format("einsum '{}': '{}' is not a subscript letter", equation, ch));
    }
  }
}

// Einsum's implicit result: the ellipsis's letters, then the letters used exactly once, sorted.
std::string implicit_result(const std::vector<std::string>& operands, const std::string& ellipsis) {
  std::map<char, int> uses;
  for (const auto& subscript : operands) {
    for (char ch : subscript) {
      if (ellipsis.find(ch) == std::string::npos) ++uses[ch];
    }
  }
  std::string result = ellipsis;
  for (const auto& [ch, count] : uses) {
    if (count == 1) result += ch;
  }
  return result;
}

}  // namespace

EinsumEquation parse_einsum_equation(const std::string& text, const std::vector<std::int64_t>& ranks) {
  const std::string equation = without_spaces(text);
  const auto arrow = equation.find("->");
  const std::string left = equation.substr(0, arrow);
  auto operands = split(left, ',');
  if (operands.size() != ranks.size()) {
    throw Error(fmt::format("einsum '{}' names {} operands but has {}", text, operands.size(), ranks.size()));
  }
  // How many dimensions each operand's ellipsis stands for; einsum aligns them from the right.
  std::vector<std::int64_t> spans(operands.size(), -1);
  std::int64_t widest = 0;
  for (std::size_t k = 0; k < operands.size(); ++k) {
    const auto dots = operands[k].find(kEllipsis);
    const auto letters = static_cast<std::int64_t>(operands[k].size()) - (dots == std::string::npos ? 0 : 3);
    if (dots != std::string::npos) {
      spans[k] = ranks[k] - letters;
      widest = std::max(widest, spans[k]);
    }
    if ((dots == std::string::npos && letters != ranks[k]) || letters > ranks[k]) {
      throw Error(fmt::format("einsum '{}': operand {} has {} dimensions, its subscript '{}' names {}", text, k,
                              ranks[k], operands[k], letters));
    }
  }
  const std::string ellipsis = unused_letters(equation, static_cast<std::size_t>(widest));
  for (std::size_t k = 0; k < operands.size(); ++k) {
    if (spans[k] >= 0) {
      operands[k].replace(operands[k].find(kEllipsis), 3, ellipsis.substr(static_cast<std::size_t>(widest - spans[k])));
    }
    check_letters(text, operands[k]);
  }
  EinsumEquation parsed{operands, ""};
  if (arrow == std::string::npos) {
    parsed.result = implicit_result(operands, std::any_of(spans.begin(), spans.end(), [](auto s) { return s >= 0; })
                                                  ? ellipsis
                                                  : std::string());
  } else {
    parsed.result = equation.substr(arrow + 2);
    if (const auto dots = parsed.result.find(kEllipsis); dots != std::string::npos) parsed.result.replace(dots, 3, ellipsis);
    check_letters(text, parsed.result);
  }
  return parsed;
}

EinsumGradient einsum_gradient(const EinsumEquation& equation, std::size_t k) {
  const std::string& own = equation.operands.at(k);
  std::string elsewhere = equation.result;
  for (std::size_t j = 0; j < equation.operands.size(); ++j) {
    if (j != k) elsewhere += equation.operands[j];
  }
  EinsumGradient gradient;
  std::string kept;
  for (std::size_t d = 0; d < own.size(); ++d) {
    if (own.find(own[d]) != d) {
      throw Error(fmt::format("einsum: operand {}'s subscript '{}' repeats '{}' (a diagonal), which has no derivative rule",
                              k, own, own[d]));
    }
    if (elsewhere.find(own[d]) == std::string::npos) gradient.lone_dims.push_back(static_cast<std::int64_t>(d));
    else kept += own[d];
  }
  gradient.equation = equation.result;
  for (std::size_t j = 0; j < equation.operands.size(); ++j) {
    if (j != k) gradient.equation += "," + equation.operands[j];
  }
  gradient.equation += "->" + kept;
  return gradient;
}

}  // namespace zenith::autodiff
