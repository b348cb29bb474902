#include "result.h"

#include <cmath>

#include <c10/util/Exception.h>

namespace zenith::bench {

Result& Result::fail(const std::string& why) {
  status = "failed";
  error = why;
  return *this;
}

std::string error_message(const std::exception& error) {
  if (auto* c10_error = dynamic_cast<const c10::Error*>(&error)) return c10_error->what_without_backtrace();
  return error.what();
}

nlohmann::json to_json(const Result& r) {
  auto number = [](double value) { return std::isfinite(value) ? nlohmann::json(value) : nlohmann::json(nullptr); };
  return {{"case", r.case_name},         {"workload", r.workload},       {"mode", r.mode},
          {"side", "c++"},               {"status", r.status},           {"error", r.error},
          {"median_ms", number(r.median_ms)}, {"p90_ms", number(r.p90_ms)}, {"reps", r.reps},
          {"first_call_ms", number(r.first_call_ms)}, {"setup_ms", number(r.setup_ms)},
          {"peak_mb", number(r.peak_mb)}, {"reserved_mb", number(r.reserved_mb)}, {"max_rel_error", number(r.max_rel_error)}, {"extra", r.extra}};
}

}  // namespace zenith::bench
