// Running one group on the plugin under test and on the reference plugin, through the C ABI.
#pragma once

#include <cstdint>
#include <string>

#include "core/backend.h"
#include "core/graph.h"

namespace zenith::conformance {

/// What became of one case or ABI check.
enum class Outcome {
  Pass,
  Fail,
  Declined,  ///< the plugin declined the group (counted as skipped)
  Skipped,   ///< could not be judged (the reference failed, nothing to check against)
};

struct CaseResult {
  Outcome outcome = Outcome::Pass;
  std::string detail;  ///< why it failed, was declined or skipped; empty for a plain pass
};

/// Queries `plugin` with `group`; when it claims the group, compiles it on the plugin and on the
/// reference, launches both kernels on two draws of random inputs (the first drawn with `seed`,
/// the second with a seed derived from it) and compares the outputs of each draw with
/// atol 1e-5 + rtol 1e-5 * |ref|: a kernel must compute at every launch, not repeat its first.
/// The plugin's outputs are filled with NaN first, so a kernel that writes nothing fails. A
/// declined group must also fail to compile.
CaseResult run_case(const Backend& plugin, const Backend& reference, const ir::Graph& group, std::uint64_t seed);

/// The query's verdict: empty when the plugin claims the group, else why not. Sets `failed` when
/// the plugin answered a well-formed group with an error status other than UNSUPPORTED.
std::string query_refusal(const Backend& plugin, const std::string& group_json, bool& failed);

}  // namespace zenith::conformance
