// zenith-conformance: runs a backend plugin through the C ABI on single ops and small groups and
// compares what it computes with the CPU plugin.
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/error_text.h"
#include "conformance/abi_checks.h"
#include "conformance/case_runner.h"
#include "conformance/cases.h"
#include "core/log.h"
#include "core/plugin_loader.h"

namespace zenith::conformance {
namespace {

const char* const kUsage = R"(usage: zenith-conformance PLUGIN.so [--reference CPU_PLUGIN.so] [--seed N]

Runs PLUGIN.so through the plugin ABI on single ops (float32, several shapes, a transposed input)
and small groups, and compares its outputs with the reference plugin's (by default
libzenith-backend-cpu.so from the folder of libzenith) within atol 1e-5 + rtol 1e-5 * |ref|.
Each case launches one kernel on two draws of random inputs (the first seeded with N, default 0),
so a kernel that repeats its first launch's results fails.
Groups the plugin declines count as skipped. Also checks that misuse of the ABI gives errors.
exit status: 0 when nothing failed and at least one case passed, 1 otherwise, 2 when a plugin
cannot be loaded or the command line is wrong.
)";

struct Arguments {
  std::string plugin;
  std::string reference;
  std::uint64_t seed = 0;
};

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string value_after(const std::vector<std::string>& words, std::size_t& i) {
  if (i + 1 >= words.size()) throw UsageError("option " + words[i] + " needs a value");
  return words[++i];
}

std::uint64_t parse_seed(const std::string& text) {
  std::size_t used = 0;
  try {
    auto seed = std::stoull(text, &used);
    if (used == text.size() && text[0] != '-') return seed;
  } catch (const std::exception&) {
  }
  throw UsageError("--seed expects a non-negative integer, got '" + text + "'");
}

Arguments parse_arguments(const std::vector<std::string>& words) {
  Arguments arguments;
  for (std::size_t i = 0; i < words.size(); ++i) {
    if (words[i] == "--reference") arguments.reference = value_after(words, i);
    else if (words[i] == "--seed") arguments.seed = parse_seed(value_after(words, i));
    else if (words[i].rfind("-", 0) == 0) throw UsageError("unknown option " + words[i]);
    else if (arguments.plugin.empty()) arguments.plugin = words[i];
    else throw UsageError("unexpected argument '" + words[i] + "'");
  }
  if (arguments.plugin.empty()) throw UsageError("missing argument: PLUGIN.so");
  if (arguments.reference.empty()) arguments.reference = libzenith_folder() + "/libzenith-backend-cpu.so";
  return arguments;
}

const char* outcome_word(Outcome outcome) {
  switch (outcome) {
    case Outcome::Pass: return "PASS";
    case Outcome::Fail: return "FAIL";
    case Outcome::Declined: return "DECLINED";
    case Outcome::Skipped: return "SKIPPED";
  }
  return "?";
}

struct Tally {
  int passed = 0, failed = 0, skipped = 0;

  void add(const std::string& name, const CaseResult& result) {
    auto detail = result.detail.empty() ? "" : ": " + result.detail;
    std::cout << fmt::format("{:<9} {}{}\n", outcome_word(result.outcome), name, detail);
    if (result.outcome == Outcome::Pass) ++passed;
    else if (result.outcome == Outcome::Fail) ++failed;
    else ++skipped;
  }
};

void describe(const char* role, const Backend& backend) {
  std::cout << fmt::format("{}: '{}' {} ({}) from {}\n", role, backend.name(), backend.version(), backend.build_id(),
                           backend.path());
}

int run(const Arguments& arguments) {
  // A plugin that cannot load is reported once, as the error below, not also as a loader warning.
  log::request(LogLevel::Error);
  // The plugin first: when it cannot load, that is the error to report.
  const Backend& plugin = *load_backend(arguments.plugin);
  const Backend& reference = *load_backend(arguments.reference);
  describe("plugin", plugin);
  describe("reference", reference);
  auto cases = conformance_cases();
  Tally tally;
  for (const auto& c : cases) tally.add(c.name, run_case(plugin, reference, c.group, arguments.seed));
  for (const auto& check : run_abi_checks(plugin, cases)) tally.add(check.name, check.result);
  std::cout << fmt::format("{} passed, {} failed, {} skipped\n", tally.passed, tally.failed, tally.skipped);
  return tally.failed == 0 && tally.passed > 0 ? 0 : 1;
}

}  // namespace
}  // namespace zenith::conformance

int main(int argc, char** argv) {
  using namespace zenith::conformance;
  std::vector<std::string> words(argv + 1, argv + argc);
  for (const auto& word : words) {
    if (word == "--help" || word == "-h") {
      std::cout << kUsage;
      return 0;
    }
  }
  try {
    return run(parse_arguments(words));
  } catch (const UsageError& e) {
    std::cerr << "zenith-conformance: " << e.what() << "\n\n" << kUsage;
  } catch (const std::exception& e) {
    std::cerr << "zenith-conformance: error: " << zenith::tools::error_text(e) << "\n";
  }
  return 2;
}
