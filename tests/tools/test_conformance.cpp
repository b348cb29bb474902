// zenith-conformance run on the CPU plugin, the example plugin and a broken plugin.
#include <regex>

#include <gtest/gtest.h>

#include "tool_runner.h"

namespace zenith {
namespace {

using tool_tests::lines_containing;
using tool_tests::run_tool;
using tool_tests::Streams;

const char* const kConformance = ZENITH_CONFORMANCE_BIN;

struct Totals {
  int passed = -1, failed = -1, skipped = -1;
};

// The closing line must be the last line, exactly "N passed, M failed, K skipped".
Totals closing_totals(const std::string& output) {
  static const std::regex closing(R"((\d+) passed, (\d+) failed, (\d+) skipped\n$)");
  std::smatch match;
  if (!std::regex_search(output, match, closing)) return {};
  auto last_line_start = output.rfind('\n', output.size() - 2);
  if (match.position(0) != static_cast<std::ptrdiff_t>(last_line_start + 1)) return {};
  return {std::stoi(match[1]), std::stoi(match[2]), std::stoi(match[3])};
}

TEST(Conformance, CpuPluginPassesAgainstItself) {
  auto run = run_tool(kConformance, {std::string(ZENITH_PLUGIN_DIR) + "/libzenith-backend-cpu.so"}, Streams::Stdout);
  EXPECT_EQ(run.exit_code, 0) << run.output;
  auto totals = closing_totals(run.output);
  EXPECT_GT(totals.passed, 40) << run.output;
  EXPECT_EQ(totals.failed, 0) << run.output;
  EXPECT_TRUE(lines_containing(run.output, "FAIL").empty()) << run.output;
  EXPECT_TRUE(lines_containing(run.output, "DECLINED").empty()) << run.output;
  EXPECT_EQ(lines_containing(run.output, "PASS      aten::layer_norm").size(), 1u) << run.output;
  EXPECT_EQ(lines_containing(run.output, "PASS      ABI:").size(), 3u) << run.output;
}

TEST(Conformance, ExamplePluginPassesWhatItClaimsAndDeclinesTheRest) {
  auto plugin = std::string(ZENITH_EXAMPLE_PLUGIN_DIR) + "/libzenith-backend-example.so";
  auto run = run_tool(kConformance, {plugin, "--reference", std::string(ZENITH_PLUGIN_DIR) + "/libzenith-backend-cpu.so"},
                      Streams::Stdout);
  EXPECT_EQ(run.exit_code, 0) << run.output;
  auto totals = closing_totals(run.output);
  EXPECT_EQ(totals.failed, 0) << run.output;
  EXPECT_GT(totals.passed, 30) << run.output;
  for (const char* op : {"aten::gelu", "aten::softmax.int", "aten::sum.dim_IntList", "aten::mm", "aten::layer_norm"}) {
    auto lines = lines_containing(run.output, std::string(" ") + op + " ");
    ASSERT_FALSE(lines.empty()) << op << "\n" << run.output;
    for (const auto& line : lines) EXPECT_EQ(line.rfind("DECLINED  ", 0), 0u) << line;
  }
  for (const char* passing : {"PASS      aten::relu [4, 33] transposed", "PASS      aten::div.Tensor [1]",
                              "PASS      chain add -> mul -> relu [4, 33] transposed",
                              "PASS      DAG sub -> (tanh, mul) with two outputs [7]"}) {
    EXPECT_EQ(lines_containing(run.output, passing).size(), 1u) << passing << "\n" << run.output;
  }
  EXPECT_EQ(lines_containing(run.output, "PASS      ABI:").size(), 3u) << run.output;
}

TEST(Conformance, WrongResultsFail) {
  auto run = run_tool(kConformance, {ZENITH_WRONG_PLUGIN}, Streams::Stdout);
  EXPECT_EQ(run.exit_code, 1) << run.output;
  auto totals = closing_totals(run.output);
  EXPECT_GE(totals.failed, 6) << run.output;
  // relu computed as abs: a numeric difference, on the first draw of the inputs.
  auto relu = lines_containing(run.output, "FAIL      aten::relu [4, 33] transposed: output 0: max abs error");
  ASSERT_EQ(relu.size(), 1u) << run.output;
  EXPECT_EQ(relu[0].find("input draw"), std::string::npos) << relu[0];
  // sigmoid right on a kernel's first launch, then that result again: caught on the second draw.
  auto sigmoid = lines_containing(run.output, "FAIL      aten::sigmoid ");
  EXPECT_EQ(sigmoid.size(), 4u) << run.output;
  for (const auto& line : sigmoid) {
    EXPECT_NE(line.find(": output 0: max abs error"), std::string::npos) << line;
    EXPECT_NE(line.find("(input draw 2 of 2: the kernel's later launch)"), std::string::npos) << line;
  }
  // neg writes nothing: the NaN the outputs were filled with shows.
  auto neg = lines_containing(run.output, "FAIL      aten::neg [7]: output 0: ");
  ASSERT_EQ(neg.size(), 1u) << run.output;
  EXPECT_NE(neg[0].find("NaN"), std::string::npos) << neg[0];
  EXPECT_EQ(lines_containing(run.output, "DECLINED  aten::add.Tensor").size(), 4u) << run.output;
  // exp is right into the tool's outputs, and hands back the input itself when asked (ABI 1.4).
  auto exp = lines_containing(run.output, "FAIL      aten::exp ");
  ASSERT_FALSE(exp.empty()) << run.output;
  for (const auto& line : exp) {
    EXPECT_NE(line.find("with outputs handed back (zn_launch_args.provided): handed-back output 0 shares memory with "
                        "input 0"),
              std::string::npos)
        << line;
  }
}

TEST(Conformance, BrokenPluginIsRefusedWithItsReason) {
  auto run = run_tool(kConformance, {std::string(ZENITH_TEST_PLUGIN_DIR) + "/libzenith-backend-wrongmajor.so"});
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("libzenith-backend-wrongmajor.so cannot be used"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("ABI"), std::string::npos) << run.output;
  EXPECT_TRUE(lines_containing(run.output, "passed,").empty()) << run.output;
}

TEST(Conformance, MissingPluginArgumentPrintsUsage) {
  auto run = run_tool(kConformance, {}, Streams::Stderr);
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.output.find("usage: zenith-conformance"), std::string::npos) << run.output;
}

}  // namespace
}  // namespace zenith
