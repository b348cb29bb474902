// `zenith-inspect plugins`: which plugin files the loader found, and why each was used or skipped.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace zenith::inspect {

/// Runs the loader's search (`paths` first, then ZENITH_PLUGIN_PATH, the install folder and the
/// folder of libzenith) and writes one line per candidate file. Returns how many loaded.
int write_plugins_report(const std::vector<std::string>& paths, std::ostream& out);

}  // namespace zenith::inspect
