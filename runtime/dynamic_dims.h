// Which dimensions of a call become symbolic, and the made-up arguments that probe other sizes of
// them.
#pragma once

#include <string>
#include <vector>

#include <ATen/core/ivalue.h>

#include "runtime/signature.h"
#include "zenith/options.h"

namespace zenith::capture {

/// Checks `dims` against the call's arguments and normalizes them (non-negative, sorted, without
/// repeats). Returns why they cannot be symbolic, or empty: each must name a dimension of a tensor
/// argument of size 2 or more, and the tensor must be dense (no gaps, no overlap) for probe inputs
/// to have its layout.
std::string check_dims(const std::vector<c10::IValue>& args, std::vector<DynamicDim>& dims);

/// The dimensions in which `now` differs from `before` when it differs in nothing but the sizes of
/// tensor arguments of the same rank; empty otherwise.
std::vector<DynamicDim> changed_dims(const Signature& before, const Signature& now);

/// `dims` and `more` together, normalized.
std::vector<DynamicDim> merge_dims(std::vector<DynamicDim> dims, const std::vector<DynamicDim>& more);

/// Per dim, the index of its symbol: dims of equal size in this call share one ("duck sizing": a
/// key cache and a value cache, ids and their mask). Symbols are numbered in order of first use.
std::vector<int> share_symbols(const std::vector<c10::IValue>& args, const std::vector<DynamicDim>& dims);

/// The call's arguments with each symbolic dimension resized to `sizes[symbol_of[k]]`: new tensors
/// in the same memory order, holding the original data where it overlaps and zeros elsewhere, so
/// that token ids stay valid indices and masks keep their values.
std::vector<c10::IValue> probe_arguments(const std::vector<c10::IValue>& args, const std::vector<DynamicDim>& dims,
                                         const std::vector<int>& symbol_of, const std::vector<std::int64_t>& sizes);

}  // namespace zenith::capture
