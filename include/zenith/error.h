// zenith::Error: the one exception type Zenith throws.
#pragma once

#include <stdexcept>
#include <string>

namespace zenith {

/// Raised for bad input and for failures Zenith cannot recover from. The message says what was
/// expected, what came and what to do. A CompiledModule that threw stays usable.
class Error : public std::runtime_error {
 public:
  /// Builds an error from a full message.
  explicit Error(const std::string& message) : std::runtime_error(message) {}

  /// Builds "<what>: expected <expected>, got <got>. <hint>" (the hint is left out when empty).
  static Error mismatch(const std::string& what, const std::string& expected, const std::string& got,
                        const std::string& hint = "");
};

}  // namespace zenith
