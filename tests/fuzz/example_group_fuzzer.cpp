// Fuzzes the example plugin's group parser (plugins/example/group_parser.cpp), the template plugin
// authors copy. Any input gives a program or throws GroupError; any other exception, a crash or an
// AddressSanitizer report is a bug.
#include <cstddef>
#include <cstdint>

#include "group_parser.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    zn_example::parse_group(reinterpret_cast<const char*>(data), size);
  } catch (const zn_example::GroupError&) {
  }
  return 0;
}
