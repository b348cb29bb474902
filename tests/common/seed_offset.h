// The first seed of the seeded random-program tests (tests/common/random_*.h): CI runs seeds 0 to
// count - 1; ZENITH_RANDOM_SEED_OFFSET=N runs N to N + count - 1 instead, for campaigns past CI's
// seeds (docs/reliability.md, "Seeded random programs", "Past CI's seeds").
#pragma once

#include <cstdlib>
#include <stdexcept>
#include <string>

namespace zenith::testing {

inline int first_seed() {
  const char* text = std::getenv("ZENITH_RANDOM_SEED_OFFSET");
  if (text == nullptr || *text == '\0') return 0;
  std::size_t used = 0;
  int offset = -1;
  try {
    offset = std::stoi(text, &used);
  } catch (const std::logic_error&) {  // not a number, or out of int's range
    used = 0;
  }
  if (used == 0 || used != std::string(text).size() || offset < 0) {
    throw std::invalid_argument(std::string("ZENITH_RANDOM_SEED_OFFSET: expected a seed of 0 or more, got ") + text);
  }
  return offset;
}

}  // namespace zenith::testing
