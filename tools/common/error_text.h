// One-line text of any exception a tool catches.
#pragma once

#include <exception>
#include <string>

#include <c10/util/Exception.h>

namespace zenith::tools {

/// The message of `error`; for a c10::Error without the C++ backtrace LibTorch appends, which
/// would turn a one-line diagnosis into a page.
inline std::string error_text(const std::exception& error) {
  if (const auto* torch_error = dynamic_cast<const c10::Error*>(&error)) return torch_error->what_without_backtrace();
  return error.what();
}

}  // namespace zenith::tools
