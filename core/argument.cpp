#include "core/argument.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace zenith::ir {

std::vector<int> Argument::value_ids() const {
  if (const auto* ref = std::get_if<ValueRef>(&value)) return {ref->id};
  std::vector<int> ids;
  if (const auto* list = std::get_if<ValueListRef>(&value)) {
    for (const auto& id : list->ids) {
      if (id) ids.push_back(*id);
    }
  }
  return ids;
}

namespace {

// Doubles always show a decimal point or exponent, so that 1.0 never reads like the integer 1
// (CSE keys nodes by this text).
std::string double_text(double v) {
  auto text = fmt::format("{}", v);
  if (text.find_first_of(".einf") == std::string::npos) text += ".0";
  return text;
}

struct Printer {
  std::string operator()(const NoneArg&) const { return "None"; }
  std::string operator()(bool v) const { return v ? "True" : "False"; }
  std::string operator()(std::int64_t v) const { return std::to_string(v); }
  std::string operator()(double v) const { return double_text(v); }
  std::string operator()(const std::string& v) const { return "\"" + v + "\""; }
  std::string operator()(const std::vector<std::int64_t>& v) const { return fmt::format("[{}]", fmt::join(v, ", ")); }
  std::string operator()(const std::vector<double>& v) const {
    std::vector<std::string> words;
    for (double d : v) words.push_back(double_text(d));
    return fmt::format("[{}]", fmt::join(words, ", "));
  }
  std::string operator()(const std::vector<bool>& v) const {
    std::vector<std::string> words;
    for (bool b : v) words.push_back(b ? "True" : "False");
    return fmt::format("[{}]", fmt::join(words, ", "));
  }
  std::string operator()(const c10::Device& v) const { return v.str(); }
  std::string operator()(const ValueRef& v) const { return "%" + std::to_string(v.id); }
  std::string operator()(const ValueListRef& v) const {
    std::vector<std::string> words;
    for (const auto& id : v.ids) words.push_back(id ? "%" + std::to_string(*id) : "None");
    return fmt::format("[{}]", fmt::join(words, ", "));
  }
};

}  // namespace

std::string Argument::to_string() const { return name + "=" + std::visit(Printer{}, value); }

}  // namespace zenith::ir
