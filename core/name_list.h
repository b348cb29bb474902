// A comma-separated list of names, as ZENITH_BACKENDS and bench_call_overhead --backends take it.
#pragma once

#include <string>
#include <vector>

namespace zenith {

/// The names in `text`, split at commas, the blanks around each trimmed, empty ones skipped:
/// "jit_cuda, cpu" and "jit_cuda,cpu," are {"jit_cuda", "cpu"}.
std::vector<std::string> split_names(const std::string& text);

}  // namespace zenith
