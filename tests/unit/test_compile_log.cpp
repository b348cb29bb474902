// The compile log: at info level one line per compile phase with its time, as each phase ends; at
// debug level one line per pass naming what it did (its counters and the ops it removed or added).
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "core/log.h"
#include "passes/pass_manager.h"
#include "unit/graph_builders.h"
#include "zenith/compile.h"

namespace zenith {
namespace {

// x.sin() twice (common subexpression elimination removes one) around a fusible chain.
at::Tensor redundant(at::Tensor x) { return (x.sin() + x.sin()).relu() * 2.0; }

// The first call's log at `level`.
std::string first_call_log(LogLevel level) {
  CompileOptions options;
  options.name = "redundant";
  options.log_level = level;
  options.dynamic_shapes = DynamicShapes::Off;
  auto fast = compile([](at::Tensor x) { return redundant(x); }, options);
  ::testing::internal::CaptureStderr();
  fast(torch::randn({4, 8}));
  return ::testing::internal::GetCapturedStderr();
}

std::size_t position_of(const std::string& log, const std::string& text) {
  auto at = log.find(text);
  EXPECT_NE(at, std::string::npos) << "no '" << text << "' in:\n" << log;
  return at;
}

TEST(CompileLog, InfoNamesEachPhaseWithItsTimeInOrder) {
  auto log = first_call_log(LogLevel::Info);
  auto capture = position_of(log, "[zenith] info: redundant: capture: ");
  auto passes = position_of(log, "[zenith] info: redundant: passes: ");
  auto backends = position_of(log, "[zenith] info: redundant: backends: ");
  auto summary = position_of(log, "compiled ");
  EXPECT_LT(capture, passes);
  EXPECT_LT(passes, backends);
  EXPECT_LT(backends, summary);
  for (auto at : {capture, passes, backends}) {
    auto line = log.substr(at, log.find('\n', at) - at);
    EXPECT_NE(line.find(" ms"), std::string::npos) << line;
  }
  EXPECT_EQ(log.find("pass cse"), std::string::npos) << "pass effects are debug lines:\n" << log;
}

TEST(CompileLog, DebugNamesWhatEachPassDid) {
  auto log = first_call_log(LogLevel::Debug);
  auto line_of = [&](const std::string& pass) {
    auto at = position_of(log, "[zenith] debug: pass " + pass + ": ");
    return at == std::string::npos ? std::string() : log.substr(at, log.find('\n', at) - at);
  };
  EXPECT_NE(line_of("cse").find("-1 aten::sin"), std::string::npos) << log;
  EXPECT_NE(line_of("dce").find("no op added or removed"), std::string::npos) << log;
  EXPECT_NE(line_of("fold_constants").find("no op added or removed"), std::string::npos) << log;
  EXPECT_NE(line_of("fuse_elementwise").find("["), std::string::npos) << "its counters:\n" << log;
}

TEST(CompileLog, DebugNamesTheOpsDeadCodeEliminationRemoved) {
  // The tracer drops dead nodes of a capture already; a graph from elsewhere (a dump, a plugin
  // author's test) may still hold them.
  testing::GraphBuilder builder;
  int x = builder.input({4, 8});
  builder.op("aten::cos", "", {testing::value("self", x)});
  int y = builder.op("aten::relu", "", {testing::value("self", x)});
  auto graph = builder.finish({y});
  log::request(LogLevel::Debug);
  ::testing::internal::CaptureStderr();
  passes::PassManager::default_pipeline(CompileOptions{}, /*inference=*/true).run(graph);
  auto log = ::testing::internal::GetCapturedStderr();
  log::request(LogLevel::Warn);
  auto at = position_of(log, "[zenith] debug: pass dce: 2 -> 1 nodes");
  ASSERT_NE(at, std::string::npos);
  EXPECT_NE(log.substr(at, log.find('\n', at) - at).find("; -1 aten::cos"), std::string::npos) << log;
}

}  // namespace
}  // namespace zenith
