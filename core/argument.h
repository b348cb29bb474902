// Argument: one schema argument of an IR node, either a constant or a reference to tensor values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <c10/core/Device.h>

namespace zenith::ir {

/// `None` as an argument.
struct NoneArg {
  bool operator==(const NoneArg&) const { return true; }
};
/// A tensor value by id.
struct ValueRef {
  int id = -1;
  bool operator==(const ValueRef& other) const { return id == other.id; }
};
/// A list of tensor values (`Tensor[]`, `Tensor?[]`); an empty optional stands for None.
struct ValueListRef {
  std::vector<std::optional<int>> ids;
  bool operator==(const ValueListRef& other) const { return ids == other.ids; }
};

/// Everything an argument can hold. Integers and doubles stay apart: a Scalar 1 and 1.0 give
/// different result dtypes.
using ArgValue = std::variant<NoneArg, bool, std::int64_t, double, std::string, std::vector<std::int64_t>,
                              std::vector<double>, std::vector<bool>, c10::Device, ValueRef, ValueListRef>;

/// A named schema argument.
struct Argument {
  std::string name;
  ArgValue value;

  bool operator==(const Argument& other) const { return name == other.name && value == other.value; }
  /// Tensor value ids this argument reads (none for constants).
  std::vector<int> value_ids() const;
  /// Readable form, e.g. "alpha=1" or "self=%3".
  std::string to_string() const;
};

}  // namespace zenith::ir
