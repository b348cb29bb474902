// Turns the group JSON the host hands to query and compile (docs/trace-format.md) into a Program,
// or explains why it cannot.
#ifndef ZENITH_EXAMPLE_GROUP_PARSER_H
#define ZENITH_EXAMPLE_GROUP_PARSER_H

#include <cstddef>
#include <stdexcept>
#include <string>

#include "program.h"

namespace zn_example {

// The two ways a group can be refused. They must stay apart because the host reacts differently:
// an unsupported group simply goes to the next plugin, a malformed one is a host bug worth
// reporting.
enum class Refusal {
  Malformed,   // not valid group JSON (syntax, missing fields, dangling ids)
  Unsupported  // valid, but uses something this plugin does not implement
};

class GroupError : public std::runtime_error {
 public:
  GroupError(Refusal refusal, const std::string& message)
      : std::runtime_error(message), refusal_(refusal) {}
  Refusal refusal() const noexcept { return refusal_; }

 private:
  Refusal refusal_;
};

// Parses `size` bytes of group JSON (not NUL-terminated). Throws GroupError when it refuses the
// group; other exceptions only for failures such as std::bad_alloc.
Program parse_group(const char* json, std::size_t size);

}  // namespace zn_example

#endif  // ZENITH_EXAMPLE_GROUP_PARSER_H
