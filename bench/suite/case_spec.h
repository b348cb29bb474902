// One case of the suite (a workload at one size and dtype), as listed in bench/suite/cases.json,
// the file the C++ runner and the Python peers both read so that they agree on every size.
#pragma once

#include <string>
#include <vector>

#include <c10/core/ScalarType.h>
#include <nlohmann/json.hpp>

namespace zenith::bench {

struct CaseSpec {
  std::string name;      ///< e.g. "bert_b1_f16"; also the stem of the case's files
  std::string workload;  ///< elementwise, sweep, bert, resnet, decode or training
  nlohmann::json params; ///< the case's parameters, smoke overrides applied when asked

  /// An integer parameter; throws naming the case when it is missing.
  std::int64_t integer(const char* key) const;
  /// A number parameter (an integer is accepted); throws naming the case when it is missing.
  double number(const char* key) const;
  /// A string parameter; throws naming the case when it is missing.
  std::string text(const char* key) const;
  /// A flag; false when absent.
  bool flag(const char* key) const;
  /// The "dtype" parameter ("float32", "float16", "bfloat16").
  c10::ScalarType dtype() const;
};

/// The cases of `path`; with `smoke`, each case's "smoke" parameters replace the full-size ones.
std::vector<CaseSpec> load_cases(const std::string& path, bool smoke);

}  // namespace zenith::bench
