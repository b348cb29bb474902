// Checks of how a plugin behaves when the host misuses the ABI: errors, never crashes.
#pragma once

#include <string>
#include <vector>

#include "conformance/case_runner.h"
#include "conformance/cases.h"

namespace zenith::conformance {

struct AbiCheck {
  std::string name;
  CaseResult result;
};

/// Query of malformed group JSON must decline or return a status; compile of a group the plugin
/// declines must return an error status; launch with the wrong number of inputs must return an
/// error. `cases` supplies a group the plugin claims for the launch check.
std::vector<AbiCheck> run_abi_checks(const Backend& plugin, const std::vector<Case>& cases);

}  // namespace zenith::conformance
