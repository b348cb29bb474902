// zenith-inspect: reads Zenith trace dumps, lists backend plugins and replays dumps.
#include <cstdint>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "common/error_text.h"
#include "inspect/command_line.h"
#include "inspect/dot_writer.h"
#include "inspect/dump_diff.h"
#include "inspect/dump_file.h"
#include "inspect/node_listing.h"
#include "inspect/plugins_report.h"
#include "inspect/replay.h"
#include "inspect/summary.h"
#include "zenith/error.h"

namespace zenith::inspect {
namespace {

const char* const kUsage = R"(usage: zenith-inspect <command> [arguments]

commands:
  summary DUMP                 module, signature, ops by count, nodes per backend, pass
                               statistics and compile times of a trace dump
  nodes DUMP [--captured]      one line per node of the optimized graph with its backend
                               (--captured: the graph as captured, before the passes)
  dot DUMP [-o FILE]           the optimized graph as Graphviz DOT (stdout unless -o/--output)
  diff BEFORE AFTER            what changed between two dumps of one model: signature, ops added
                               or removed per op, groups and their backends, pass statistics,
                               the verdict (compiled, eager and why, symbolic dimensions); exit 1
                               when they differ (compile times are shown, never compared)
  plugins [--path P ...]       every backend plugin candidate: where it was found, loaded or
                               skipped and why (also spelled --plugins; honours ZENITH_PLUGIN_PATH)
  replay DUMP [--seed N] [--path P ...] [--trace OUT.json [--runs N]]
                               runs the optimized graph through the backends and through the
                               reference interpreter on random inputs of the recorded types and
                               devices, and compares the outputs (exit 1 when some differ).
                               Floating-point inputs are drawn from randn; integer inputs (token
                               ids, indices) from {0, 1} and bool inputs at random, which keeps
                               every index in range but may not exercise what a model means
                               by them. --trace then runs the plan N more times (default 3),
                               timing each step on the host and its device, and writes a profile
                               that ui.perfetto.dev and chrome://tracing open.

DUMP is a JSON file written to ZENITH_DUMP_DIR (CompileOptions::dump_dir).
exit status: 0 success, 1 replay outputs differ or the dumps differ, 2 bad usage or an unreadable dump
)";

struct Command {
  OptionSpec options;
  std::function<int(const CommandLine&)> run;
};

int run_summary(const CommandLine& line) {
  expect_positionals(line, 1, "DUMP");
  write_summary(load_dump(line.positionals[0]), std::cout);
  return 0;
}

int run_nodes(const CommandLine& line) {
  expect_positionals(line, 1, "DUMP");
  write_node_listing(load_dump(line.positionals[0]), line.has_flag("--captured"), std::cout);
  return 0;
}

int run_dot(const CommandLine& line) {
  expect_positionals(line, 1, "DUMP");
  auto dump = load_dump(line.positionals[0]);
  auto file = line.last("-o");
  if (!file) file = line.last("--output");
  if (!file) {
    write_dot(dump, std::cout);
    return 0;
  }
  std::ofstream out(*file);
  if (!out) throw Error("cannot write " + *file + ": check that the folder exists and is writable");
  write_dot(dump, out);
  return 0;
}

int run_diff(const CommandLine& line) {
  expect_positionals(line, 2, "BEFORE AFTER");
  const auto before = load_dump(line.positionals[0]), after = load_dump(line.positionals[1]);
  std::cout << "--- " << line.positionals[0] << "\n+++ " << line.positionals[1] << "\n";
  return write_dump_diff(before, after, std::cout) == 0 ? 0 : 1;
}

int run_plugins(const CommandLine& line) {
  expect_positionals(line, 0, "");
  write_plugins_report(line.all("--path"), std::cout);
  return 0;
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

int parse_runs(const std::string& text) {
  std::size_t used = 0;
  try {
    auto runs = std::stoi(text, &used);
    if (used == text.size() && runs >= 1) return runs;
  } catch (const std::exception&) {
  }
  throw UsageError("--runs expects a positive integer, got '" + text + "'");
}

int run_replay(const CommandLine& line) {
  expect_positionals(line, 1, "DUMP");
  ReplayOptions options;
  if (auto seed = line.last("--seed")) options.seed = parse_seed(*seed);
  options.plugin_paths = line.all("--path");
  if (auto trace = line.last("--trace")) options.trace_path = *trace;
  if (auto runs = line.last("--runs")) {
    if (options.trace_path.empty()) throw UsageError("--runs counts the runs of a profile: give --trace OUT.json too");
    options.trace_runs = parse_runs(*runs);
  }
  const auto& file = line.positionals[0];
  auto dump = load_dump(file);
  try {
    return replay(dump, options, std::cout);
  } catch (const std::exception& e) {
    throw Error(file + ": " + tools::error_text(e));
  }
}

const std::map<std::string, Command>& commands() {
  static const std::map<std::string, Command> table = {
      {"summary", {{}, run_summary}},
      {"nodes", {{{}, {"--captured"}}, run_nodes}},
      {"dot", {{{"-o", "--output"}, {}}, run_dot}},
      {"diff", {{}, run_diff}},
      {"plugins", {{{"--path"}, {}}, run_plugins}},
      {"replay", {{{"--seed", "--path", "--trace", "--runs"}, {}}, run_replay}},
  };
  return table;
}

bool asks_for_help(const std::vector<std::string>& words) {
  for (const auto& word : words) {
    if (word == "--help" || word == "-h") return true;
  }
  return !words.empty() && words[0] == "help";
}

int dispatch(std::vector<std::string> words) {
  if (asks_for_help(words)) {
    std::cout << kUsage;
    return 0;
  }
  if (words.empty()) throw UsageError("missing command");
  auto name = words[0] == "--plugins" ? std::string("plugins") : words[0];
  auto it = commands().find(name);
  if (it == commands().end()) throw UsageError("unknown command '" + words[0] + "'");
  words.erase(words.begin());
  return it->second.run(parse_command_line(words, it->second.options));
}

}  // namespace
}  // namespace zenith::inspect

int main(int argc, char** argv) {
  using namespace zenith::inspect;
  try {
    return dispatch(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const UsageError& e) {
    std::cerr << "zenith-inspect: " << e.what() << "\n\n" << kUsage;
  } catch (const std::exception& e) {
    std::cerr << "zenith-inspect: error: " << zenith::tools::error_text(e) << "\n";
  }
  return 2;
}
