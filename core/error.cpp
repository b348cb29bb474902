#include "zenith/error.h"

namespace zenith {

Error Error::mismatch(const std::string& what, const std::string& expected, const std::string& got,
                      const std::string& hint) {
  std::string message = what + ": expected " + expected + ", got " + got + ".";
  if (!hint.empty()) message += " " + hint;
  return Error(message);
}

}  // namespace zenith
