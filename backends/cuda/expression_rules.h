// How each elementwise ATen op becomes a float32 CUDA expression, shared by the code generators:
// the storage types they load and store, the device helpers every kernel starts with, and the
// expression rule of every op a fused group may hold.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include <c10/core/ScalarType.h>

#include "core/graph.h"

namespace zenith::cuda {

/// Why a group cannot become a kernel; generators throw it and return its reason.
struct Unsupported {
  std::string reason;
};

/// The CUDA storage type of `dtype` ("float", "__half", "__nv_bfloat16", "bool"), or null when
/// generated kernels cannot load or store it.
const char* storage_type(c10::ScalarType dtype);

/// A float expression that reads back to exactly the float rounding of `v`: a literal, or a bit
/// pattern for infinities and NaN.
std::string float_literal(double v);

/// The device helpers (loads and stores converting to float32, NaN-propagating max/min, ...).
const char* device_prelude();

/// The float expression `v` rounded as a value of `dtype` would be: unchanged for float32, through
/// float16 or bfloat16 and back for those, 0 or 1 for bool. Throws Unsupported for other dtypes.
std::string rounded(const std::string& v, c10::ScalarType dtype);

/// Whether `qualified_name` ("aten::add.Tensor") has an expression rule.
bool has_expression_rule(const std::string& qualified_name);

/// The float expression computing `node` from the names of its operands (`names`: value id to a
/// C++ identifier in scope). Throws Unsupported for an op without a rule or an argument the rule
/// cannot take.
std::string expression(const ir::Graph& group, const ir::Node& node, const std::map<int, std::string>& names);

/// A stable 64-bit FNV-1a hash of `text`, for kernel names derived from keys.
std::uint64_t key_hash(const std::string& text);

}  // namespace zenith::cuda
