// A small command-line parser: positional words, options with a value, and flags.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace zenith::inspect {

/// A command line that does not parse; main prints it with the usage text and exits with 2.
class UsageError : public std::runtime_error {
 public:
  explicit UsageError(const std::string& message) : std::runtime_error(message) {}
};

/// The options one subcommand accepts, spelled as typed ("--seed", "-o").
struct OptionSpec {
  std::set<std::string> with_value;
  std::set<std::string> flags;
};

/// A parsed command line.
struct CommandLine {
  std::vector<std::string> positionals;
  std::map<std::string, std::vector<std::string>> values;  ///< every occurrence, in order
  std::set<std::string> flags;

  bool has_flag(const std::string& flag) const { return flags.count(flag) != 0; }
  /// The last value given for `option`, if any.
  std::optional<std::string> last(const std::string& option) const;
  /// Every value given for `option` (repeatable options such as --path).
  std::vector<std::string> all(const std::string& option) const;
};

/// Parses `words` (without the program and subcommand names). Accepts "--opt value" and
/// "--opt=value"; "--" ends the options. Throws UsageError for an unknown option or a missing value.
CommandLine parse_command_line(const std::vector<std::string>& words, const OptionSpec& spec);

/// Throws UsageError unless exactly `count` positional words were given; `names` lists them for the message.
void expect_positionals(const CommandLine& line, std::size_t count, const std::string& names);

}  // namespace zenith::inspect
