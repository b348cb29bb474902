// `zenith-inspect replay`: runs a dump's optimized graph through a fresh plan and through the
// reference interpreter, and compares the outputs.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "core/dump.h"

namespace zenith::inspect {

struct ReplayOptions {
  /// Seeds ATen's generator for the random inputs.
  std::uint64_t seed = 0;
  /// Plugin files or folders searched before the default places.
  std::vector<std::string> plugin_paths;
  /// When not empty: after the checked run, the plan runs `trace_runs` more times, each timed step
  /// by step, and the replay profile is written here (docs/profiling.md).
  std::string trace_path;
  int trace_runs = 3;
};

/// Replays the optimized graph on random inputs of the recorded types and devices (and profiles
/// the replay when options.trace_path is set). Returns 0 when
/// every output matches the interpreter, 1 when some differ; throws zenith::Error when the dump
/// cannot be replayed (an elided constant, a device this machine lacks, no backend for a node).
int replay(const Dump& dump, const ReplayOptions& options, std::ostream& out);

}  // namespace zenith::inspect
