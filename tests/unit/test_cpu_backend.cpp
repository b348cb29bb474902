// The CPU plugin through the ABI: it claims CPU groups, declines others with a reason, runs
// multi-output and in-place ops, and reports bad launches as errors.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "core/dlpack_view.h"
#include "core/graph_json.h"
#include "core/group.h"
#include "core/interpreter.h"
#include "core/plugin_loader.h"
#include "graph_builders.h"
#include "zenith/error.h"

namespace zenith {
namespace {

using testing::GraphBuilder;
using testing::real;
using testing::scalar;
using testing::value;

const Backend& cpu() {
  static const Backend* backend = load_backend(ZENITH_PLUGIN_DIR "/libzenith-backend-cpu.so");
  return *backend;
}

std::string group_json(const ir::Graph& graph) {
  std::vector<int> all;
  for (std::size_t i = 0; i < graph.nodes.size(); ++i) all.push_back(static_cast<int>(i));
  return ir::to_json(ir::extract_group(graph, all, graph.consumers()).graph, ir::GraphKind::Group).dump();
}

// Runs a whole graph as one group on the CPU plugin, outputs poisoned first.
std::vector<at::Tensor> launch(const ir::Graph& graph, const std::vector<at::Tensor>& inputs) {
  auto kernel = cpu().compile(group_json(graph));
  std::vector<DLTensor> in, out;
  std::vector<at::Tensor> results;
  for (const auto& t : inputs) in.push_back(borrow_dlpack(t));
  for (int id : graph.outputs) {
    const auto& type = graph.value(id).type;
    // Poison: a kernel that leaves an output unwritten cannot pass.
    double poison = at::isFloatingType(type.dtype) ? std::nan("") : -12345.0;
    results.push_back(at::full(type.sizes, poison, at::TensorOptions().dtype(type.dtype)));
  }
  for (const auto& t : results) out.push_back(borrow_dlpack(t));
  cpu().launch(*kernel, in, out, nullptr);
  return results;
}

TEST(CpuBackend, RunsAGroupLikeTheReferenceInterpreter) {
  GraphBuilder b;
  int x = b.input({5, 7});
  int w = b.input({7, 3});
  int mm = b.op("aten::mm", "", {value("self", x), value("other", w)});
  int sm = b.op("aten::softmax", "int", {value("self", mm), scalar("dim", -1), testing::none("dtype")});
  auto maxed = b.apply("aten::max", "dim", {value("self", sm), scalar("dim", 1), {"keepdim", false}});
  auto g = b.finish({sm, maxed[0], maxed[1]});
  auto inputs = b.example_inputs();
  auto want = ir::interpret(g, inputs);
  auto got = launch(g, inputs);
  ASSERT_EQ(got.size(), 3u);
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(at::allclose(got[i], want[i], 1e-6, 1e-6)) << i;
}

TEST(CpuBackend, NonContiguousInputs) {
  GraphBuilder b;
  int x = b.input({4, 6});
  int y = b.op("aten::sigmoid", "", {value("self", x)});
  auto g = b.finish({y});
  auto transposed = at::randn({6, 4}).t();
  g.value(x).type.strides = transposed.strides().vec();
  auto got = launch(g, {transposed});
  EXPECT_TRUE(at::allclose(got[0], at::sigmoid(transposed)));
}

TEST(CpuBackend, InPlaceOpWritesTheInputMemory) {
  GraphBuilder b;
  int x = b.input({8});
  int y = b.input({8});
  int z = b.op("aten::add_", "Tensor", {value("self", x), value("other", y), scalar("alpha", 2)});
  auto g = b.finish({z});
  auto group = ir::extract_group(g, {0}, g.consumers());
  ASSERT_EQ(group.graph.output_aliases, std::vector<int>{0});
  auto kernel = cpu().compile(ir::to_json(group.graph, ir::GraphKind::Group).dump());
  auto xs = at::randn({8}), ys = at::randn({8});
  auto expected = xs + 2 * ys;
  std::vector<DLTensor> in{borrow_dlpack(xs), borrow_dlpack(ys)}, out{borrow_dlpack(xs)};
  cpu().launch(*kernel, in, out, nullptr);
  EXPECT_TRUE(at::allclose(xs, expected));
}

TEST(CpuBackend, DeclinesTensorsOnOtherDevicesWithAReason) {
  auto g = testing::elementwise_chain();
  auto json = ir::to_json(g, ir::GraphKind::Group);
  json["output_aliases"] = {-1};
  json["values"][0]["device"] = "cuda:0";
  auto reason = cpu().query(json.dump());
  ASSERT_TRUE(reason.has_value());
  EXPECT_NE(reason->find("is on cuda:0"), std::string::npos) << *reason;
  EXPECT_FALSE(cpu().query(group_json(g)).has_value());
}

TEST(CpuBackend, BadLaunchesAndGroupsAreErrorsNotCrashes) {
  auto g = testing::elementwise_chain();
  auto kernel = cpu().compile(group_json(g));
  auto x = at::randn({4, 8});
  std::vector<DLTensor> none_in, out{borrow_dlpack(x)};
  try {
    cpu().launch(*kernel, none_in, out, nullptr);
    FAIL() << "a launch with no inputs must fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("takes 1 inputs"), std::string::npos) << e.what();
  }
  auto wrong = at::randn({2, 2});
  std::vector<DLTensor> wrong_in{borrow_dlpack(wrong)};
  EXPECT_THROW(cpu().launch(*kernel, wrong_in, out, nullptr), Error);
  EXPECT_THROW(cpu().compile("{\"schema_version\": 1"), Error);
  auto reason = cpu().query("not json at all");
  ASSERT_TRUE(reason.has_value());
  EXPECT_NE(reason->find("not valid JSON"), std::string::npos) << *reason;
}

}  // namespace
}  // namespace zenith
