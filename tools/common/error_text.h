// One-line text of any exception a tool catches.
#pragma once

#include <exception>
#include <string>

#include "core/exception_message.h"

namespace zenith::tools {

/// The message of `error`; for a c10::Error without the C++ backtrace LibTorch appends, which
/// would turn a one-line diagnosis into a page.
inline std::string error_text(const std::exception& error) { return message_of(error); }

}  // namespace zenith::tools
