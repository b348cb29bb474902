// An exception's message for Zenith's own messages and logs.
#pragma once

#include <exception>
#include <string>

#include <c10/util/Exception.h>

namespace zenith {

/// The message of `error`; for LibTorch's errors without the C++ backtrace that buries it.
inline std::string message_of(const std::exception& error) {
  const auto* torch_error = dynamic_cast<const c10::Error*>(&error);
  return torch_error ? torch_error->what_without_backtrace() : error.what();
}

}  // namespace zenith
