#include "zenith/version.h"

#include <fmt/format.h>

namespace zenith {

// The library's own numbers, compiled in when libzenith was built.
Version version() { return Version{ZENITH_VERSION_MAJOR, ZENITH_VERSION_MINOR, ZENITH_VERSION_PATCH}; }

std::string version_string() {
  const auto v = version();
  return fmt::format("{}.{}.{}", v.major, v.minor, v.patch);
}

}  // namespace zenith
