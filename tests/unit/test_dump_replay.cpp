// Trace dumps: a compiled module writes one per signature; it loads back and replays to the
// same result as eager, on the traced inputs and on fresh ones; broken dumps give errors naming
// the position or field.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <torch/torch.h>

#include "common/temp_folder.h"
#include "core/dump.h"
#include "runtime/executor.h"
#include "core/interpreter.h"
#include "core/plugin_loader.h"
#include "models/bert.h"
#include "passes/lowering.h"
#include "zenith/compile.h"

namespace zenith {
namespace {
namespace fs = std::filesystem;

using zenith::testing::remove_folder;

fs::path fresh_folder(const std::string& name) {
  auto folder = fs::temp_directory_path() / ("zenith-test-" + name + "-" + std::to_string(::getpid()));
  remove_folder(folder);
  return folder;
}

TEST(DumpReplay, BertDumpReplaysToTheEagerResult) {
  torch::manual_seed(7);
  torch::NoGradGuard no_grad;
  auto config = models::BertConfig::small();
  models::Bert model(config);
  model->eval();
  CompileOptions options;
  options.dump_dir = fresh_folder("bert").string();
  options.name = "bert";
  auto fast = compile(model, options);
  auto ids = torch::randint(config.vocab_size, {1, 8}, torch::kLong);
  auto mask = torch::ones({1, 8}, torch::kLong);
  fast(ids, mask);
  auto report = fast.report();
  ASSERT_FALSE(report.dump_path.empty());
  ASSERT_TRUE(fs::exists(report.dump_path));

  auto dump = dump_from_json(read_json_file(report.dump_path));
  EXPECT_EQ(dump.module_name, "bert");
  EXPECT_EQ(dump.signature, report.signature);
  EXPECT_EQ(static_cast<std::int64_t>(dump.captured.nodes.size()), report.nodes_captured);
  EXPECT_EQ(static_cast<std::int64_t>(dump.optimized.nodes.size()), report.nodes_final);
  EXPECT_EQ(dump.report.passes.size(), report.passes.size());
  std::size_t assigned = 0;
  for (const auto& step : dump.steps) assigned += step.nodes.size();
  EXPECT_EQ(assigned, dump.optimized.nodes.size()) << "every node is placed on a backend or the host";

  // Replay with the live parameters, on the traced inputs and on fresh token ids: the plan and the
  // interpreter agree with eager. 1e-5: the same ATen kernels, in the same order, on float32 values
  // of order one; a matrix product may sum in another order. Stale values are off by order one.
  CompileReport replay_report;
  auto plan = passes::lower_to_plan(dump.optimized, discover_backends({}), replay_report);
  for (const auto& tokens : {ids, torch::randint(config.vocab_size, {1, 8}, torch::kLong)}) {
    const bool traced = tokens.is_same(ids);
    std::vector<at::Tensor> inputs{tokens, mask};
    for (const auto& p : model->named_parameters()) inputs.push_back(p.value());
    for (const auto& b : model->named_buffers()) inputs.push_back(b.value());
    auto replayed = execute(plan, inputs).toTensor();
    auto expected = model->forward(tokens, mask);
    EXPECT_TRUE(torch::allclose(replayed, expected, 1e-5, 1e-5)) << (traced ? "traced ids" : "fresh ids");
    auto interpreted = ir::interpret(dump.captured, inputs);
    EXPECT_TRUE(torch::allclose(interpreted.at(0), expected, 1e-5, 1e-5)) << (traced ? "traced ids" : "fresh ids");
  }
  remove_folder(options.dump_dir);
}

TEST(DumpReplay, EachSignatureGetsItsOwnDump) {
  torch::manual_seed(8);
  torch::NoGradGuard no_grad;
  CompileOptions options;
  options.dump_dir = fresh_folder("signatures").string();
  auto fast = compile([](at::Tensor x) { return torch::relu(x) + 1; }, options);
  fast(torch::randn({2}));
  fast(torch::randn({3}));
  fast(torch::randn({3}));
  std::size_t files = 0;
  for (const auto& entry : fs::directory_iterator(options.dump_dir)) files += entry.path().extension() == ".json";
  EXPECT_EQ(files, 2u);
  // The second dump carries the plan cache counters of its capture, and they read back.
  auto dump = dump_from_json(read_json_file(fast.report().dump_path));
  EXPECT_EQ(dump.report.plan_cache.misses, 2);
  EXPECT_EQ(dump.report.plan_cache.recaptures, 1);
  EXPECT_EQ(dump.report.plan_cache.hits, 0);
  remove_folder(options.dump_dir);
}

std::string load_error(const std::string& text) {
  auto path = fresh_folder("broken").string() + ".json";
  std::ofstream(path) << text;
  try {
    dump_from_json(read_json_file(path));
  } catch (const Error& e) {
    fs::remove(path);
    return e.what();
  }
  fs::remove(path);
  return "";
}

TEST(DumpReplay, BrokenDumpsGiveErrorsNotCrashes) {
  torch::manual_seed(9);
  torch::NoGradGuard no_grad;
  CompileOptions options;
  options.dump_dir = fresh_folder("good").string();
  auto fast = compile([](at::Tensor x) { return x.exp() * 2; }, options);
  fast(torch::randn({4}));
  std::ifstream in(fast.report().dump_path);
  std::string good((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(load_error(good), "");
  EXPECT_NE(load_error(good.substr(0, good.size() / 3)).find("is not valid JSON (byte"), std::string::npos);
  EXPECT_NE(load_error("{\"kind\": \"graph\"}").find("expected \"dump\""), std::string::npos);
  auto json = nlohmann::json::parse(good);
  json["optimized"]["nodes"][0]["args"][0].erase("name");
  EXPECT_NE(load_error(json.dump()).find("/optimized"), std::string::npos) << load_error(json.dump());
  EXPECT_NE(load_error(json.dump()).find("missing 'name'"), std::string::npos);
  auto steps = nlohmann::json::parse(good);
  steps["steps"][0].erase("backend");
  EXPECT_NE(load_error(steps.dump()).find("/steps/0"), std::string::npos);
  EXPECT_NE(load_error("").find("not valid JSON"), std::string::npos);
  remove_folder(options.dump_dir);
}

}  // namespace
}  // namespace zenith
