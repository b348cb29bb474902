// Milliseconds since a point on the steady clock, for the compile report's phase and pass times.
#pragma once

#include <chrono>

namespace zenith {

using Clock = std::chrono::steady_clock;

inline double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

}  // namespace zenith
