// Compile options for tests that check a compiled path: a call that cannot run compiled fails the
// test (a zenith::Error) instead of running eagerly and passing unseen.
#pragma once

#include <string>

#include "zenith/compile.h"

namespace zenith::testing {

/// Options named `name` with fallback_to_eager off.
inline CompileOptions no_fallback(const std::string& name) {
  CompileOptions o;
  o.name = name;
  o.fallback_to_eager = false;
  return o;
}

}  // namespace zenith::testing
