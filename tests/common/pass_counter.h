// A pass's counter in a compile report, for tests that check which rewrites a compile made.
#pragma once

#include <cstdint>
#include <string>

#include "zenith/options.h"

namespace zenith::testing {

/// Counter `counter` of pass `pass` in `report` (0 when the pass did not run or did not count it).
inline std::int64_t pass_counter(const CompileReport& report, const std::string& pass, const std::string& counter) {
  for (const auto& entry : report.passes) {
    if (entry.name != pass) continue;
    const auto it = entry.counters.find(counter);
    return it == entry.counters.end() ? 0 : it->second;
  }
  return 0;
}

}  // namespace zenith::testing
