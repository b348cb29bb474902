// One row of the suite's results: a case run in one mode, with its figures or why it has none.
#pragma once

#include <exception>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

namespace zenith::bench {

struct Result {
  std::string case_name;
  std::string workload;
  std::string mode;              ///< eager, torchscript, zenith, aoti, device copy, eager (training), zenith (training)
  std::string status = "ok";     ///< ok, failed (error says why) or skipped (error says why)
  std::string error;
  double median_ms = std::numeric_limits<double>::quiet_NaN();  ///< per call (or per step)
  double p90_ms = std::numeric_limits<double>::quiet_NaN();
  int reps = 0;
  double first_call_ms = std::numeric_limits<double>::quiet_NaN();  ///< the first call, wall clock
  double setup_ms = std::numeric_limits<double>::quiet_NaN();       ///< load, freeze, compile before the first call
  double peak_mb = std::numeric_limits<double>::quiet_NaN();        ///< device memory above what was allocated before
  double reserved_mb = std::numeric_limits<double>::quiet_NaN();    ///< the allocator's reserve above its start (PeakMemory)
  double max_rel_error = std::numeric_limits<double>::quiet_NaN();  ///< against eager: max |x - ref| / max |ref|
  nlohmann::json extra = nlohmann::json::object();                   ///< workload-specific figures

  /// Marks the result failed with `why`.
  Result& fail(const std::string& why);
};

/// The message of an exception, without LibTorch's backtrace.
std::string error_message(const std::exception& error);

/// The JSON object of a result; NaN figures are written as null.
nlohmann::json to_json(const Result& result);

}  // namespace zenith::bench
