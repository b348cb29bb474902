// Fuzzes trace-dump reading (core/dump.cpp) as zenith-inspect does it (tools/inspect: load_dump,
// then the summary and the per-node listings). Any input gives a dump or throws zenith::Error;
// any other exception, a crash or an AddressSanitizer report is a bug.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <sstream>
#include <string>

#include "inspect/dump_file.h"
#include "inspect/summary.h"
#include "zenith/error.h"

namespace {

// The file load_dump reads: one per process, rewritten for every input.
const std::string& input_path() {
  static const std::string path = "/tmp/zenith-fuzz-dump-" + std::to_string(::getpid()) + ".json";
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (std::FILE* file = std::fopen(input_path().c_str(), "wb")) {
    std::fwrite(data, 1, size, file);
    std::fclose(file);
  }
  try {
    auto dump = zenith::inspect::load_dump(input_path());
    std::ostringstream out;
    zenith::inspect::write_summary(dump, out);
    zenith::inspect::op_counts(dump.optimized);
    zenith::inspect::backend_counts(dump);
    for (const auto& step : dump.steps) zenith::inspect::step_ops(dump.optimized, step);
  } catch (const zenith::Error&) {
  }
  return 0;
}
