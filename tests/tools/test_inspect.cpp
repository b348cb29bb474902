// zenith-inspect run as a user would: on dumps written here, good and broken.
#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "core/dump.h"
#include "tool_runner.h"

namespace zenith {
namespace {

using tool_tests::lines_containing;
using tool_tests::run_tool;
using tool_tests::Streams;
using tool_tests::ToolRun;

const char* const kInspect = ZENITH_INSPECT_BIN;

ir::TensorType float_type(std::vector<std::int64_t> sizes) {
  ir::TensorType type;
  type.sizes = sizes;
  type.strides.assign(sizes.size(), 1);
  for (std::size_t d = sizes.size(); d > 1; --d) type.strides[d - 2] = type.strides[d - 1] * sizes[d - 1];
  return type;
}

ir::Argument tensor(const std::string& name, int id) { return {name, ir::ValueRef{id}}; }

// x, weight (parameter), c (constant) -> relu -> add -> mul -> relu -> output.
ir::Graph relu_add_graph() {
  ir::Graph graph;
  auto type = float_type({3, 4});
  int x = graph.add_value(type, ir::ValueRole::Input, "x");
  int w = graph.add_value(type, ir::ValueRole::Parameter, "linear.weight");
  int c = graph.add_value(type, ir::ValueRole::Constant, "c");
  graph.inputs = {x, w};
  graph.constants[c] = at::full({3, 4}, 0.5);
  int r1 = graph.add_value(type, ir::ValueRole::Intermediate);
  graph.nodes.push_back({"aten::relu", "", {tensor("self", x)}, {r1}, false});
  int sum = graph.add_value(type, ir::ValueRole::Intermediate);
  graph.nodes.push_back(
      {"aten::add", "Tensor", {tensor("self", r1), tensor("other", w), {"alpha", std::int64_t{1}}}, {sum}, false});
  int product = graph.add_value(type, ir::ValueRole::Intermediate);
  graph.nodes.push_back({"aten::mul", "Tensor", {tensor("self", sum), tensor("other", c)}, {product}, false});
  int r2 = graph.add_value(type, ir::ValueRole::Intermediate);
  graph.nodes.push_back({"aten::relu", "", {tensor("self", product)}, {r2}, false});
  graph.outputs = {r2};
  return graph;
}

// Token ids into a table: an integer input, as in a language model.
ir::Graph embedding_graph() {
  ir::Graph graph;
  ir::TensorType ids = float_type({5});
  ids.dtype = c10::ScalarType::Long;
  int table = graph.add_value(float_type({10, 4}), ir::ValueRole::Parameter, "embed.weight");
  int tokens = graph.add_value(ids, ir::ValueRole::Input, "tokens");
  graph.inputs = {tokens, table};
  int out = graph.add_value(float_type({5, 4}), ir::ValueRole::Intermediate);
  graph.nodes.push_back({"aten::embedding", "",
                         {tensor("weight", table), tensor("indices", tokens), {"padding_idx", std::int64_t{-1}},
                          {"scale_grad_by_freq", false}, {"sparse", false}},
                         {out}, false});
  graph.outputs = {out};
  return graph;
}

Dump dump_of(const ir::Graph& graph, const std::string& module) {
  Dump dump;
  dump.module_name = module;
  dump.signature = "x: float32[3, 4]";
  dump.captured = graph;
  dump.optimized = graph;
  std::vector<int> all(graph.nodes.size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i);
  dump.steps = {{"cpu", all, {}}};
  dump.report.passes = {{"dead_code_elimination", 5, 4, 0.25, {{"removed", 1}}}};
  dump.report.capture_ms = 12.5;
  dump.report.total_ms = 20.0;
  return dump;
}

class InspectTest : public ::testing::Test {
 protected:
  void SetUp() override { folder_ = tool_tests::make_temp_folder(); }
  void TearDown() override { tool_tests::remove_folder(folder_); }

  std::string path(const std::string& name) const { return folder_ + "/" + name; }

  std::string write_dump(const std::string& name, const Dump& dump, std::size_t constant_limit = SIZE_MAX) {
    write_json_file(path(name), dump_to_json(dump, constant_limit));
    return path(name);
  }

  std::string write_json(const std::string& name, const nlohmann::json& json) {
    tool_tests::write_text_file(path(name), json.dump(1));
    return path(name);
  }

  std::string good_dump() { return write_dump("good.json", dump_of(relu_add_graph(), "ReluAdd")); }

  static ToolRun inspect(const std::vector<std::string>& arguments, Streams streams = Streams::Both) {
    return run_tool(kInspect, arguments, streams);
  }

  // A broken dump must give exit code 2 (not a crash) and one line naming the file and `field`.
  static void expect_rejected(const std::string& file, const std::string& field,
                              const std::vector<std::string>& commands = {"summary"}) {
    for (const auto& command : commands) {
      auto run = inspect({command, file});
      EXPECT_EQ(run.exit_code, 2) << command << ":\n" << run.output;
      EXPECT_NE(run.output.find(file), std::string::npos) << command << ":\n" << run.output;
      EXPECT_NE(run.output.find(field), std::string::npos) << command << ":\n" << run.output;
      EXPECT_EQ(std::count(run.output.begin(), run.output.end(), '\n'), 1) << "one line:\n" << run.output;
    }
  }

  std::string folder_;
};

TEST_F(InspectTest, SummaryListsOpsByCountBackendsPassesAndTimes) {
  auto run = inspect({"summary", good_dump()});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto& text = run.output;
  EXPECT_NE(text.find("ReluAdd"), std::string::npos) << text;
  EXPECT_NE(text.find("x: float32[3, 4]"), std::string::npos) << text;
  ASSERT_EQ(lines_containing(text, "aten::relu").size(), 1u) << text;
  EXPECT_NE(lines_containing(text, "aten::relu")[0].find(" 2  aten::relu"), std::string::npos) << text;
  EXPECT_NE(lines_containing(text, "aten::add.Tensor")[0].find(" 1  aten::add.Tensor"), std::string::npos) << text;
  // Sorted by count: relu (2) before add and mul (1 each).
  EXPECT_LT(text.find("aten::relu"), text.find("aten::add.Tensor")) << text;
  ASSERT_EQ(lines_containing(text, "  cpu").size(), 1u) << text;
  EXPECT_NE(lines_containing(text, "  cpu")[0].find("4  cpu"), std::string::npos) << text;
  auto pass = lines_containing(text, "dead_code_elimination");
  ASSERT_EQ(pass.size(), 1u) << text;
  EXPECT_NE(pass[0].find("removed=1"), std::string::npos) << text;
  EXPECT_NE(pass[0].find("5 -> 4"), std::string::npos) << text;
  EXPECT_NE(text.find("capture 12.500 ms"), std::string::npos) << text;
  EXPECT_NE(text.find("total 20.000 ms"), std::string::npos) << text;
}

TEST_F(InspectTest, SummarySaysWhyAGroupWentToItsBackend) {
  auto dump = dump_of(relu_add_graph(), "ReluAdd");
  EXPECT_NE(inspect({"summary", write_dump("plain.json", dump)}).output.find(
                "(none: every group went to the first backend asked)"),
            std::string::npos);
  dump.steps = {{"cpu", {0, 1}, {"jit_cuda: no CUDA tensor in the group", "example: aten::add.Tensor is not supported"}},
                {"cpu", {2, 3}, {}}};
  auto run = inspect({"summary", write_dump("declined.json", dump)});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto& text = run.output;
  EXPECT_EQ(lines_containing(text, "step 0 ran on cpu: aten::relu + aten::add.Tensor").size(), 1u) << text;
  EXPECT_EQ(lines_containing(text, "declined by jit_cuda: no CUDA tensor in the group").size(), 1u) << text;
  EXPECT_EQ(lines_containing(text, "declined by example: aten::add.Tensor is not supported").size(), 1u) << text;
  EXPECT_TRUE(lines_containing(text, "step 1 ran on").empty()) << "nobody declined step 1:\n" << text;
}

TEST_F(InspectTest, SummaryListsGraphBreaks) {
  auto dump = dump_of(relu_add_graph(), "ReluAdd");
  EXPECT_TRUE(lines_containing(inspect({"summary", write_dump("plain.json", dump)}).output, "graph breaks").empty());
  dump.report.graph_breaks = {"aten::add.Tensor: cpu: not today"};
  auto run = inspect({"summary", write_dump("breaks.json", dump)});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(lines_containing(run.output, "graph breaks: 1 nodes run eagerly between kernels").size(), 1u) << run.output;
  EXPECT_EQ(lines_containing(run.output, "  aten::add.Tensor: cpu: not today").size(), 1u) << run.output;
}

TEST_F(InspectTest, SummaryListsValueChecks) {
  auto dump = dump_of(relu_add_graph(), "ReluAdd");
  EXPECT_TRUE(lines_containing(inspect({"summary", write_dump("plain.json", dump)}).output, "value checks").empty());
  dump.report.value_checks = {"aten::item of bool[] (graph value %3), checked after step 0 of 2"};
  auto run = inspect({"summary", write_dump("checks.json", dump)});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(lines_containing(run.output, "value checks: 1 data reads checked while the plan runs").size(), 1u)
      << run.output;
  EXPECT_EQ(lines_containing(run.output, "  aten::item of bool[] (graph value %3), checked after step 0 of 2").size(), 1u)
      << run.output;
}

TEST_F(InspectTest, DiffOfADumpWithItselfFindsNothing) {
  auto file = good_dump();
  auto run = inspect({"diff", file, file});
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("no differences"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("ops in the optimized graph: same"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("signature: x: float32[3, 4]"), std::string::npos) << run.output;
}

TEST_F(InspectTest, DiffNamesTheSignatureGroupsBackendsPassesAndVerdict) {
  auto before = dump_of(relu_add_graph(), "ReluAdd");
  auto after = before;
  after.signature = "x: float32[3, 8]";
  after.steps = {{"cpu", {0, 1}, {}}, {"jit_cuda", {2, 3}, {}}};
  after.report.passes = {{"dead_code_elimination", 5, 3, 9.0, {{"removed", 2}}}};
  after.report.total_ms = 99.0;  // times are shown, never compared
  auto run = inspect({"diff", write_dump("before.json", before), write_dump("after.json", after)});
  EXPECT_EQ(run.exit_code, 1) << run.output;
  const auto& text = run.output;
  EXPECT_NE(text.find("-> x: float32[3, 8]"), std::string::npos) << text;
  // One group of four nodes on the CPU became two groups of two, one of them on another backend.
  EXPECT_EQ(lines_containing(text, "-1  cpu: aten::relu + aten::add.Tensor + aten::mul.Tensor + aten::relu  (1 -> 0)").size(), 1u)
      << text;
  EXPECT_EQ(lines_containing(text, "+1  cpu: aten::relu + aten::add.Tensor  (0 -> 1)").size(), 1u) << text;
  EXPECT_EQ(lines_containing(text, "+1  jit_cuda: aten::mul.Tensor + aten::relu  (0 -> 1)").size(), 1u) << text;
  EXPECT_EQ(lines_containing(text, "-2  cpu  (4 -> 2)").size(), 1u) << text;
  EXPECT_EQ(lines_containing(text, "+2  jit_cuda  (0 -> 2)").size(), 1u) << text;
  EXPECT_EQ(lines_containing(text, "dead_code_elimination: nodes 5 -> 4, removed=1").size(), 1u) << text;
  EXPECT_EQ(lines_containing(text, "became nodes 5 -> 3, removed=2").size(), 1u) << text;
  EXPECT_NE(text.find("ops in the optimized graph: same"), std::string::npos) << text;
  EXPECT_NE(text.find("total 20.000 ms -> 99.000 ms"), std::string::npos) << text;
  // The signature, the plan's step count, three group lines, two backend counts and the pass.
  EXPECT_NE(text.find("\n8 differences\n"), std::string::npos) << text;
}

TEST_F(InspectTest, DiffCountsOpsAddedAndRemovedAndAnEagerVerdict) {
  auto before = dump_of(relu_add_graph(), "Model");
  auto after = dump_of(embedding_graph(), "Model");
  after.report.eager_fallback = true;
  after.report.fallback_reason = "the forward depends on tensor data the trace cannot see";
  auto run = inspect({"diff", write_dump("a.json", before), write_dump("b.json", after)});
  EXPECT_EQ(run.exit_code, 1) << run.output;
  const auto& text = run.output;
  EXPECT_EQ(lines_containing(text, "-2  aten::relu  (2 -> 0)").size(), 2u) << "optimized and captured:\n" << text;
  EXPECT_EQ(lines_containing(text, "+1  aten::embedding  (0 -> 1)").size(), 2u) << text;
  EXPECT_NE(text.find("-> runs eagerly: the forward depends on tensor data the trace cannot see"), std::string::npos)
      << text;
}

TEST_F(InspectTest, DiffNeedsTwoReadableDumps) {
  auto one = inspect({"diff", good_dump()});
  EXPECT_EQ(one.exit_code, 2) << one.output;
  EXPECT_NE(one.output.find("BEFORE AFTER"), std::string::npos) << one.output;
  auto missing = inspect({"diff", good_dump(), path("absent.json")});
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_NE(missing.output.find("absent.json"), std::string::npos) << missing.output;
  EXPECT_EQ(missing.output.find("---"), std::string::npos) << "nothing printed before the error:\n" << missing.output;
}

TEST_F(InspectTest, NodesListsEveryNodeWithItsBackend) {
  auto run = inspect({"nodes", good_dump()}, Streams::Stdout);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  auto node_lines = lines_containing(run.output, " = aten::");
  ASSERT_EQ(node_lines.size(), 4u) << run.output;
  for (const auto& line : node_lines) EXPECT_NE(line.find(" cpu "), std::string::npos) << line;
  EXPECT_NE(node_lines[0].find("%3 = aten::relu(self=%0)"), std::string::npos) << node_lines[0];
  EXPECT_NE(node_lines[1].find("aten::add.Tensor(self=%3, other=%1, alpha=1)"), std::string::npos) << node_lines[1];

  auto captured = inspect({"nodes", good_dump(), "--captured"}, Streams::Stdout);
  ASSERT_EQ(captured.exit_code, 0) << captured.output;
  EXPECT_NE(captured.output.find("captured graph"), std::string::npos) << captured.output;
  EXPECT_EQ(lines_containing(captured.output, " = aten::").size(), 4u) << captured.output;
}

TEST_F(InspectTest, DotDescribesTheOptimizedGraph) {
  auto run = inspect({"dot", good_dump()}, Streams::Stdout);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(run.output.rfind("digraph", 0), 0u) << run.output;
  for (const char* op : {"aten::relu", "aten::add.Tensor", "aten::mul.Tensor"}) {
    EXPECT_NE(run.output.find(op), std::string::npos) << op << "\n" << run.output;
  }
  EXPECT_NE(run.output.find("label=\"float32[3, 4]\""), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("\\ncpu\""), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("n0 -> n1"), std::string::npos) << run.output;
  EXPECT_EQ(run.output.back(), '\n');
  EXPECT_EQ(run.output.substr(run.output.size() - 2), "}\n");

  auto file = path("graph.dot");
  auto to_file = inspect({"dot", good_dump(), "-o", file}, Streams::Stdout);
  ASSERT_EQ(to_file.exit_code, 0) << to_file.output;
  EXPECT_TRUE(to_file.output.empty()) << to_file.output;
  std::ifstream in(file);
  std::stringstream written;
  written << in.rdbuf();
  EXPECT_EQ(written.str(), run.output);
}

TEST_F(InspectTest, ReplayMatchesTheInterpreter) {
  auto run = inspect({"replay", good_dump(), "--seed", "7", "--path", ZENITH_PLUGIN_DIR});
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("output 0: [3, 4] float32"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("1 of 1 outputs match"), std::string::npos) << run.output;
}

TEST_F(InspectTest, ReplayTraceWritesASpanPerStepOfEachRun) {
  auto trace_file = path("replay.trace.json");
  auto run = inspect({"replay", good_dump(), "--path", ZENITH_PLUGIN_DIR, "--trace", trace_file, "--runs", "2"});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("profile: 2 runs of 4 steps written to " + trace_file), std::string::npos) << run.output;
  auto trace = read_json_file(trace_file);
  std::size_t runs = 0;
  std::map<std::size_t, int> spans_per_step;
  for (const auto& event : trace.at("traceEvents")) {
    if (event.at("ph") != "X") continue;
    if (event.at("cat") == "run") {
      ++runs;
    } else {
      EXPECT_EQ(event.at("cat"), "cpu");
      EXPECT_EQ(event.at("tid"), 0) << "CPU kernels have no device track";
      ++spans_per_step[event.at("args").at("step").get<std::size_t>()];
    }
  }
  EXPECT_EQ(runs, 2u);
  // One group per node in this dump: relu, add, mul, relu.
  EXPECT_EQ(spans_per_step, (std::map<std::size_t, int>{{0, 2}, {1, 2}, {2, 2}, {3, 2}})) << trace.dump(1);
}

TEST_F(InspectTest, ReplayRunsWithoutTraceIsAUsageError) {
  auto run = inspect({"replay", good_dump(), "--runs", "2"}, Streams::Stderr);
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("--trace"), std::string::npos) << run.output;
}

TEST_F(InspectTest, ReplayReportsOutputsThatDiffer) {
  auto run = inspect({"replay", good_dump(), "--path", ZENITH_WRONG_PLUGIN});
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find("wrong: 2"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find(": DIFFERS"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("0 of 1 outputs match"), std::string::npos) << run.output;
}

TEST_F(InspectTest, ReplayFindsTheCpuPluginThroughTheEnvironment) {
  auto run = run_tool(kInspect, {"replay", good_dump()}, Streams::Both,
                      {std::string("ZENITH_PLUGIN_PATH=") + ZENITH_PLUGIN_DIR});
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("cpu: 4"), std::string::npos) << run.output;
}

TEST_F(InspectTest, ReplayDrawsSmallIntegerInputsAndSaysSo) {
  auto file = write_dump("embedding.json", dump_of(embedding_graph(), "Embedding"));
  auto run = inspect({"replay", file, "--path", ZENITH_PLUGIN_DIR});
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("'tokens'"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("{0, 1}"), std::string::npos) << run.output;
}

TEST_F(InspectTest, ReplayOfAnElidedConstantNamesIt) {
  auto file = write_dump("elided.json", dump_of(relu_add_graph(), "ReluAdd"), /*constant_limit=*/0);
  auto run = inspect({"replay", file});
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("constant %2 'c'"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("dump_constant_limit"), std::string::npos) << run.output;
  // The other commands do not need the data.
  EXPECT_EQ(inspect({"summary", file}).exit_code, 0);
}

TEST_F(InspectTest, TruncatedJsonIsRejectedWithItsPosition) {
  auto text = dump_to_json(dump_of(relu_add_graph(), "ReluAdd"), SIZE_MAX).dump(1);
  auto file = path("truncated.json");
  tool_tests::write_text_file(file, text.substr(0, text.size() / 2));
  expect_rejected(file, "byte", {"nodes", "dot", "replay"});
}

TEST_F(InspectTest, ArrayIsRejected) {
  expect_rejected(write_json("array.json", nlohmann::json::array({1, 2, 3})), "expected an object");
}

TEST_F(InspectTest, WrongKindIsRejected) {
  auto json = dump_to_json(dump_of(relu_add_graph(), "ReluAdd"), SIZE_MAX);
  json["kind"] = "graph";
  expect_rejected(write_json("kind.json", json), "/kind");
  json["kind"] = 7;
  expect_rejected(write_json("kind-number.json", json), "/kind");
}

TEST_F(InspectTest, ReplayOnAMissingDeviceSaysWhich) {
  ir::Graph graph;
  auto type = float_type({3, 4});
  // No machine has 98 GPUs, so this fails the same way everywhere.
  type.device = c10::Device("cuda:97");
  int x = graph.add_value(type, ir::ValueRole::Input, "x");
  int y = graph.add_value(type, ir::ValueRole::Intermediate);
  graph.inputs = {x};
  graph.nodes.push_back({"aten::relu", "", {tensor("self", x)}, {y}, false});
  graph.outputs = {y};
  auto file = write_dump("cuda.json", dump_of(graph, "OnGpu"));
  auto run = inspect({"replay", file});
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find(file), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("input %0 'x'"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("cuda:97"), std::string::npos) << run.output;
}

TEST_F(InspectTest, WrongSchemaVersionIsRejected) {
  auto json = dump_to_json(dump_of(relu_add_graph(), "ReluAdd"), SIZE_MAX);
  json["schema_version"] = 99;
  expect_rejected(write_json("version.json", json), "schema_version");
}

TEST_F(InspectTest, NodeReadingAnUndefinedValueIsRejected) {
  auto json = dump_to_json(dump_of(relu_add_graph(), "ReluAdd"), SIZE_MAX);
  json["optimized"]["nodes"][0]["args"][0]["value"] = 42;
  expect_rejected(write_json("undefined.json", json), "%42");
}

TEST_F(InspectTest, FieldOfTheWrongTypeIsRejected) {
  auto json = dump_to_json(dump_of(relu_add_graph(), "ReluAdd"), SIZE_MAX);
  json["steps"][0]["nodes"] = "all";
  expect_rejected(write_json("steps.json", json), "/steps/0");
}

TEST_F(InspectTest, StepNamingAMissingNodeIsRejected) {
  auto json = dump_to_json(dump_of(relu_add_graph(), "ReluAdd"), SIZE_MAX);
  json["steps"][0]["nodes"].push_back(17);
  expect_rejected(write_json("step-node.json", json), "node 17");
}

TEST_F(InspectTest, MissingFileIsRejected) { expect_rejected(path("absent.json"), "cannot open"); }

TEST(InspectUsage, HelpPrintsUsageAndSucceeds) {
  auto run = run_tool(kInspect, {"--help"}, Streams::Stdout);
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_NE(run.output.find("usage: zenith-inspect"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("integer inputs"), std::string::npos) << run.output;
}

TEST(InspectUsage, BadCommandLinesPrintUsageOnStderr) {
  const std::vector<std::vector<std::string>> bad = {
      {}, {"frobnicate"}, {"summary", "a.json", "b.json"}, {"dot", "a.json", "-o"},
      {"replay", "a.json", "--seed", "minus-one"}, {"replay", "a.json", "--trace", "t.json", "--runs", "0"}};
  for (const auto& arguments : bad) {
    auto stderr_text = run_tool(kInspect, arguments, Streams::Stderr);
    EXPECT_EQ(stderr_text.exit_code, 2) << stderr_text.output;
    EXPECT_NE(stderr_text.output.find("usage: zenith-inspect"), std::string::npos) << stderr_text.output;
  }
  EXPECT_TRUE(run_tool(kInspect, {"frobnicate"}, Streams::Stdout).output.empty());
}

class PluginsTest : public ::testing::Test {
 protected:
  // The candidate line of `file`; the search order above the candidates names paths too.
  static std::string line_of(const std::string& output, const std::string& file) {
    auto candidates = output.find("candidates:\n");
    EXPECT_NE(candidates, std::string::npos) << output;
    auto lines = lines_containing(output.substr(candidates == std::string::npos ? 0 : candidates), file);
    EXPECT_EQ(lines.size(), 1u) << file << "\n" << output;
    return lines.empty() ? "" : lines[0];
  }
};

TEST_F(PluginsTest, BrokenPluginsAreSkippedWithTheirReason) {
  std::string dir = ZENITH_TEST_PLUGIN_DIR;
  auto run = run_tool(kInspect, {"plugins", "--path", dir, "--path", dir + "/not-a-plugin.so"}, Streams::Stdout);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"libzenith-backend-wrongmajor.so", "ABI"},
      {"libzenith-backend-noentry.so", "zn_plugin_get_api"},
      {"libzenith-backend-initfails.so", "init failed"},
      {"libzenith-backend-shorttable.so", "table"},
      {"not-a-plugin.so", "not a loadable shared library"},
  };
  for (const auto& [file, reason] : expected) {
    auto line = line_of(run.output, file);
    EXPECT_NE(line.find("skipped"), std::string::npos) << line;
    EXPECT_NE(line.find(reason), std::string::npos) << line;
    EXPECT_NE(line.find("[explicit]"), std::string::npos) << line;
  }
  EXPECT_NE(line_of(run.output, "libzenith-backend-wrongmajor.so").find("major"), std::string::npos);
  auto cpu = line_of(run.output, "libzenith-backend-cpu.so");
  EXPECT_NE(cpu.find("loaded"), std::string::npos) << cpu;
  EXPECT_NE(cpu.find("priority 100"), std::string::npos) << cpu;
  // Default plugins (torch_gpu where LibTorch has CUDA, loaded or not) add to the totals; the
  // five broken ones are checked line by line above.
  EXPECT_NE(run.output.find(" candidates, "), std::string::npos) << run.output;
  EXPECT_NE(run.output.find(" skipped"), std::string::npos) << run.output;
}

TEST_F(PluginsTest, DashDashPluginsIsAnAliasAndHonoursTheEnvironment) {
  auto run = run_tool(kInspect, {"--plugins"}, Streams::Stdout,
                      {std::string("ZENITH_PLUGIN_PATH=") + ZENITH_EXAMPLE_PLUGIN_DIR});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  auto example = line_of(run.output, "libzenith-backend-example.so");
  EXPECT_NE(example.find("loaded"), std::string::npos) << example;
  EXPECT_NE(example.find("[ZENITH_PLUGIN_PATH]"), std::string::npos) << example;
  EXPECT_NE(line_of(run.output, "libzenith-backend-cpu.so").find("loaded"), std::string::npos);
}

}  // namespace
}  // namespace zenith
