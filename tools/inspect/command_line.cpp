#include "inspect/command_line.h"

namespace zenith::inspect {
namespace {

bool looks_like_option(const std::string& word) { return word.size() > 1 && word[0] == '-'; }

// Splits "--opt=value" into its parts; a word without '=' is all name.
std::pair<std::string, std::optional<std::string>> split_inline_value(const std::string& word) {
  auto equals = word.find('=');
  if (equals == std::string::npos || word.rfind("--", 0) != 0) return {word, std::nullopt};
  return {word.substr(0, equals), word.substr(equals + 1)};
}

}  // namespace

std::optional<std::string> CommandLine::last(const std::string& option) const {
  auto it = values.find(option);
  if (it == values.end() || it->second.empty()) return std::nullopt;
  return it->second.back();
}

std::vector<std::string> CommandLine::all(const std::string& option) const {
  auto it = values.find(option);
  return it == values.end() ? std::vector<std::string>{} : it->second;
}

CommandLine parse_command_line(const std::vector<std::string>& words, const OptionSpec& spec) {
  CommandLine line;
  bool options_ended = false;
  for (std::size_t i = 0; i < words.size(); ++i) {
    const auto& word = words[i];
    if (options_ended || !looks_like_option(word)) {
      line.positionals.push_back(word);
      continue;
    }
    if (word == "--") {
      options_ended = true;
      continue;
    }
    auto [name, inline_value] = split_inline_value(word);
    if (spec.flags.count(name) && !inline_value) {
      line.flags.insert(name);
    } else if (spec.with_value.count(name)) {
      if (!inline_value && i + 1 >= words.size()) throw UsageError("option " + name + " needs a value");
      line.values[name].push_back(inline_value ? *inline_value : words[++i]);
    } else {
      throw UsageError("unknown option " + word);
    }
  }
  return line;
}

void expect_positionals(const CommandLine& line, std::size_t count, const std::string& names) {
  if (line.positionals.size() < count) throw UsageError("missing argument: " + names);
  if (line.positionals.size() > count) throw UsageError("unexpected argument '" + line.positionals[count] + "'");
}

}  // namespace zenith::inspect
