// The CPU plugin through the ABI: it claims CPU groups, declines others with a reason, runs
// multi-output and in-place ops, and reports bad launches as errors.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "core/dlpack_view.h"
#include "runtime/executor.h"
#include "runtime/plan_graph.h"
#include "core/graph_json.h"
#include "core/group.h"
#include "core/interpreter.h"
#include "core/plugin_loader.h"
#include "common/fresh_inputs.h"
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

std::vector<DLTensor> views_of(const std::vector<at::Tensor>& tensors) {
  std::vector<DLTensor> views;
  for (const auto& t : tensors) views.push_back(borrow_dlpack(t));
  return views;
}

// Runs a whole graph as one group on the CPU plugin, outputs poisoned first: one kernel, launched
// on each set of inputs in turn, so that a kernel repeating its first launch's results fails.
std::vector<std::vector<at::Tensor>> launch_each(const ir::Graph& graph,
                                                 const std::vector<std::vector<at::Tensor>>& input_sets) {
  auto kernel = cpu().compile(group_json(graph));
  std::vector<std::vector<at::Tensor>> all;
  for (const auto& inputs : input_sets) {
    std::vector<at::Tensor> results;
    for (int id : graph.outputs) {
      const auto& type = graph.value(id).type;
      // Poison: a kernel that leaves an output unwritten cannot pass.
      double poison = at::isFloatingType(type.dtype) ? std::nan("") : -12345.0;
      results.push_back(at::full(type.sizes, poison, at::TensorOptions().dtype(type.dtype)));
    }
    cpu().launch(*kernel, views_of(inputs), views_of(results), nullptr);
    all.push_back(std::move(results));
  }
  return all;
}

// `inputs`, then fresh standard-normal values of the same signatures.
std::vector<std::vector<at::Tensor>> with_fresh(const std::vector<at::Tensor>& inputs) {
  std::vector<at::Tensor> fresh;
  for (const auto& input : inputs) fresh.push_back(testing::fresh_like(input));
  return {inputs, fresh};
}

TEST(CpuBackend, RunsAGroupLikeTheReferenceInterpreter) {
  GraphBuilder b;
  int x = b.input({5, 7});
  int w = b.input({7, 3});
  int mm = b.op("aten::mm", "", {value("self", x), value("other", w)});
  int sm = b.op("aten::softmax", "int", {value("self", mm), scalar("dim", -1), testing::none("dtype")});
  auto maxed = b.apply("aten::max", "dim", {value("self", sm), scalar("dim", 1), {"keepdim", false}});
  auto g = b.finish({sm, maxed[0], maxed[1]});
  at::manual_seed(1);
  const auto input_sets = with_fresh(b.example_inputs());
  const auto launches = launch_each(g, input_sets);
  // 1e-6: the plugin runs the interpreter's ATen kernels; mm may sum in another order.
  for (std::size_t call = 0; call < launches.size(); ++call) {
    auto want = ir::interpret(g, input_sets[call]);
    const auto& got = launches[call];
    ASSERT_EQ(got.size(), 3u);
    for (std::size_t i = 0; i < got.size(); ++i)
      EXPECT_TRUE(at::allclose(got[i], want[i], 1e-6, 1e-6)) << "launch " << call << ", output " << i;
  }
}

TEST(CpuBackend, NonContiguousInputs) {
  at::manual_seed(2);
  GraphBuilder b;
  int x = b.input({4, 6});
  int y = b.op("aten::sigmoid", "", {value("self", x)});
  auto g = b.finish({y});
  auto transposed = at::randn({6, 4}).t();
  g.value(x).type.strides = transposed.strides().vec();
  const auto input_sets = with_fresh({transposed});
  const auto launches = launch_each(g, input_sets);
  for (std::size_t call = 0; call < launches.size(); ++call) {
    EXPECT_TRUE(at::allclose(launches[call][0], at::sigmoid(input_sets[call][0]))) << "launch " << call;
  }
}

TEST(CpuBackend, InPlaceOpWritesTheInputMemory) {
  at::manual_seed(3);
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
  at::manual_seed(4);
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

// Launches `graph` as one group asking the plugin for every output in its own memory (ABI 1.4).
std::vector<at::Tensor> launch_provided(const ir::Graph& graph, const std::vector<at::Tensor>& inputs) {
  CompileOutcome outcome;
  auto kernel = cpu().compile(group_json(graph), "{}", &outcome);
  EXPECT_TRUE(outcome.provides_outputs);
  EXPECT_TRUE(kernel->provides_outputs());
  std::vector<DLTensor> out;
  for (int id : graph.outputs) out.push_back(describe_dlpack(graph.value(id).type));  // the plugin's to give
  std::vector<DLManagedTensor*> provided(out.size(), nullptr);
  cpu().launch(*kernel, views_of(inputs), out, nullptr, &provided);
  std::vector<at::Tensor> results;
  for (std::size_t o = 0; o < provided.size(); ++o) {
    EXPECT_NE(provided[o], nullptr) << "output " << o;
    if (provided[o] != nullptr) results.push_back(adopt_dlpack(provided[o]));
  }
  return results;
}

TEST(CpuBackend, HandsBackOutputsInsteadOfCopying) {
  GraphBuilder b;
  int x = b.input({5, 7});
  int w = b.input({7, 3});
  int mm = b.op("aten::mm", "", {value("self", x), value("other", w)});
  int sm = b.op("aten::softmax", "int", {value("self", mm), scalar("dim", -1), testing::none("dtype")});
  auto g = b.finish({mm, sm});
  at::manual_seed(5);
  for (const auto& inputs : with_fresh(b.example_inputs())) {
    auto want = ir::interpret(g, inputs);
    auto got = launch_provided(g, inputs);
    ASSERT_EQ(got.size(), 2u);
    // 1e-6: the plugin runs the interpreter's ATen kernels; mm may sum in another order.
    for (std::size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(at::allclose(got[i], want[i], 1e-6, 1e-6)) << i;
    EXPECT_FALSE(got[0].storage().is_alias_of(got[1].storage()));
  }
}

TEST(CpuBackend, HandedBackViewsOfInputsAreCopies) {
  at::manual_seed(6);
  // The output is a view of the input: handing it back as is would let a later in-place step
  // write through it into the input.
  GraphBuilder b;
  int x = b.input({4, 6});
  int y = b.op("aten::t", "", {value("self", x)});
  auto g = b.finish({y});
  auto input = at::randn({4, 6});
  auto got = launch_provided(g, {input});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(at::equal(got[0], input.t()));
  EXPECT_NE(got[0].data_ptr(), input.data_ptr());
}

TEST(CpuBackend, HandedBackOutputsAreLaidOutAsTheIrSays) {
  at::manual_seed(7);
  ir::TensorType type;
  type.dtype = at::kFloat;
  type.device = at::kCPU;
  type.sizes = {6, 4};
  type.strides = {4, 1};
  auto transposed = at::randn({4, 6}).t();  // strides {1, 6}
  auto laid_out = conform_output(adopt_dlpack(lend_dlpack(transposed)), type, "cpu", 0);
  EXPECT_EQ(laid_out.strides(), c10::IntArrayRef(type.strides));
  EXPECT_TRUE(at::equal(laid_out, transposed));
  auto same = at::randn({6, 4});
  EXPECT_EQ(conform_output(adopt_dlpack(lend_dlpack(same)), type, "cpu", 0).data_ptr(), same.data_ptr());
  try {
    conform_output(adopt_dlpack(lend_dlpack(at::randn({6, 5}))), type, "cpu", 3);
    FAIL() << "a handed-back output of the wrong size must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("output 3 handed back by backend 'cpu'"), std::string::npos) << e.what();
  }
}

TEST(CpuBackend, AskingAKernelThatCannotProvideIsAnError) {
  at::manual_seed(8);
  // The example plugin predates ABI 1.4's provided outputs: its kernels always write host memory.
  const auto* example = load_backend(ZENITH_EXAMPLE_PLUGIN_DIR "/libzenith-backend-example.so");
  auto g = testing::elementwise_chain();
  auto kernel = example->compile(group_json(g));
  ASSERT_FALSE(kernel->provides_outputs());
  auto x = at::randn({4, 8}), y = at::empty({4, 8});
  std::vector<DLTensor> in{borrow_dlpack(x)}, out{borrow_dlpack(y)};
  std::vector<DLManagedTensor*> provided(1, nullptr);
  EXPECT_THROW(example->launch(*kernel, in, out, nullptr, &provided), Error);
}

TEST(PlanGraph, CapturesOnlyCudaKernelsDeclaredGraphSafe) {
  auto g = testing::elementwise_chain();
  Plan plan;
  if (plan_graph_refusal(plan) == "this LibTorch has no CUDA") GTEST_SKIP() << "this LibTorch has no CUDA";
  EXPECT_NE(plan_graph_refusal(plan).find("launches no kernel"), std::string::npos) << plan_graph_refusal(plan);
  Step step;
  step.kernel = cpu().compile(group_json(g));
  step.backend = "cpu";
  step.device = c10::Device(c10::kCPU);
  plan.steps.push_back(step);
  EXPECT_NE(plan_graph_refusal(plan).find("runs on cpu"), std::string::npos) << plan_graph_refusal(plan);
  // A kernel from a plugin that does not declare graph safety (the example plugin is older than
  // ABI 1.4's graph_safe), as if it ran on a GPU.
  const auto* example = load_backend(ZENITH_EXAMPLE_PLUGIN_DIR "/libzenith-backend-example.so");
  plan.steps[0].kernel = example->compile(group_json(g));
  plan.steps[0].backend = "example";
  plan.steps[0].device = c10::Device(c10::kCUDA, 0);
  EXPECT_NE(plan_graph_refusal(plan).find("backend example does not declare its kernels safe"), std::string::npos)
      << plan_graph_refusal(plan);
  std::string why;
  EXPECT_EQ(make_plan_graph(std::make_shared<Plan>(plan), {true}, 0, "test", nullptr, why), nullptr);
  EXPECT_FALSE(why.empty());
}

TEST(PlanGraph, AGraphHandingOutputsOutInPlaceIsRefusedASharedPool) {
  // The graphs sharing a module's pool reuse each other's memory between replays, so an output
  // handed out in place would be overwritten by the next graph's replay; a graph that copies every
  // output out may share it. Nothing here touches a device: a plan graph makes its first CUDA call
  // when it captures.
  auto pool = make_graph_pool();
  if (!pool) GTEST_SKIP() << "this LibTorch has no CUDA";
  Plan plan;
  plan.graph = testing::elementwise_chain();
  Step step;
  // A kernel that declares itself graph-safe, on a GPU; never launched (it has no handle).
  step.kernel = std::make_shared<Kernel>(&cpu(), nullptr, /*provides_outputs=*/false, /*graph_safe=*/true);
  step.backend = "cpu";
  step.device = c10::Device(c10::kCUDA, 0);
  plan.steps.push_back(step);
  ASSERT_EQ(plan_graph_refusal(plan), "");
  const auto shared = std::make_shared<Plan>(plan);
  const auto outputs = plan.graph.outputs.size();
  ASSERT_GE(outputs, 1u);
  const std::vector<bool> copied_in(plan.graph.inputs.size(), false);
  std::string why;
  EXPECT_EQ(make_plan_graph(shared, copied_in, outputs - 1, "test", nullptr, why, nullptr, pool), nullptr);
  EXPECT_NE(why.find("hands 1 of its"), std::string::npos) << why;
  EXPECT_NE(make_plan_graph(shared, copied_in, outputs, "test", nullptr, why, nullptr, pool), nullptr) << why;
  EXPECT_TRUE(why.empty()) << why;
  // With a pool of its own (a training step's graphs: saved values wait in it for the backward).
  EXPECT_NE(make_plan_graph(shared, copied_in, 0, "test", nullptr, why), nullptr) << why;
}

}  // namespace
}  // namespace zenith
