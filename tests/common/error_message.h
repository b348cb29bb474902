// The message of the zenith::Error a call throws, for tests that check what the user is told.
#pragma once

#include <string>

#include "zenith/error.h"

namespace zenith::testing {

/// Runs `call` and returns the message of the zenith::Error it throws, or "" when it throws none
/// (any other exception passes through and fails the test).
template <typename Call>
std::string error_message_of(Call&& call) {
  try {
    call();
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

}  // namespace zenith::testing
