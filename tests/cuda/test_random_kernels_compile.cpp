// The CUDA code generators on random programs, without a GPU (CI has none): each seeded program
// (tests/common/random_program.h) is captured on the CPU the way zenith::compile captures a
// callable, its values retyped to CUDA, optimized by the default pipeline and cut into groups the
// way partitioning cuts them; every group gets a kernel or a reason, and every kernel compiles
// with NVRTC for sm_90. Numerics are checked on the GPU (tests/gpu/test_random_fusion.cpp).
#include <gtest/gtest.h>

#include <chrono>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "backends/cuda/kernel_codegen.h"
#include "backends/cuda/nvrtc_compiler.h"
#include "capture/tracer_capture.h"
#include "common/random_program.h"
#include "core/group.h"
#include "core/op_registry.h"
#include "core/printer.h"
#include "core/row_reduction.h"
#include "passes/pass_manager.h"

namespace zenith::cuda {
namespace {

constexpr int kPrograms = 200;

// The same spread over dtypes as the GPU test, so that seed N is the same program in both.
c10::ScalarType dtype_of(int seed) {
  const c10::ScalarType dtypes[] = {at::kFloat, at::kHalf, at::kBFloat16};
  return dtypes[seed % 3];
}

// Captures `program` as compile() captures a callable: one traced eager run, converted to the IR.
capture::Capture capture_program(const testing::RandomProgram& program) {
  detail::ModuleAccess access;
  access.forward = [run = program.run](const std::vector<c10::IValue>& args) {
    std::vector<at::Tensor> tensors;
    for (const auto& arg : args) tensors.push_back(arg.toTensor());
    return c10::IValue(run(tensors));
  };
  std::vector<c10::IValue> args(program.inputs.begin(), program.inputs.end());
  return capture::capture_forward(access, args, {});
}

// What the JIT backend is offered besides fusion groups: a node alone that it could run.
bool kernel_candidate(const ir::Graph& graph, const ir::Node& node) {
  auto category = ir::op_info(node.op).category;
  return category == ir::OpCategory::Elementwise ||
         (category == ir::OpCategory::Reduction && ir::row_reduction(graph, node).has_value());
}

struct Tally {
  int fusion_groups = 0;
  int fusion_generated = 0;
  int singles = 0;
  int singles_generated = 0;
  // Reason -> how often, and the first group that gave it.
  struct Declined {
    int count = 0;
    int seed = -1;
    std::string group;
  };
  std::map<std::string, Declined> declined_groups;
  std::map<std::string, Declined> declined_singles;
};

TEST(RandomKernels, EveryGroupOfRandomProgramsGeneratesAndCompiles) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  double nvrtc_seconds = 0;
  Tally tally;
  std::set<std::string> compiled;  // kernel keys: a kernel shared by programs compiles once
  for (int seed = 0; seed < kPrograms; ++seed) {
    auto program = testing::make_random_program(static_cast<std::uint64_t>(seed), dtype_of(seed), at::kCPU);
    const std::string where =
        "seed " + std::to_string(seed) + ", " + c10::toString(program.dtype) + "\n" + program.description;
    auto captured = capture_program(program);
    if (!captured.unsupported.empty()) {
      ADD_FAILURE() << "capture: " << captured.unsupported << "\n" << where;
      continue;
    }
    ir::Graph graph = std::move(captured.graph);
    // Retyped before the passes, as a capture of CUDA tensors would have typed it.
    for (auto& value : graph.values) {
      if (value) value->type.device = c10::Device(c10::kCUDA, 0);
    }
    passes::PassManager::default_pipeline(CompileOptions{}).run(graph);

    // The node lists partitioning offers: each fusion group whole, and each other node alone.
    std::map<int, std::vector<int>> groups;
    std::vector<std::vector<int>> singles;
    for (std::size_t n = 0; n < graph.nodes.size(); ++n) {
      const auto& node = graph.nodes[n];
      if (node.fusion_group >= 0) {
        groups[node.fusion_group].push_back(static_cast<int>(n));
      } else if (kernel_candidate(graph, node)) {
        singles.push_back({static_cast<int>(n)});
      }
    }
    const auto consumers = graph.consumers();
    auto offer = [&](const std::vector<int>& nodes, bool fused) {
      auto group = ir::extract_group(graph, nodes, consumers);
      auto generated = generate_kernel(group.graph);
      (fused ? tally.fusion_groups : tally.singles) += 1;
      if (const auto* why = std::get_if<std::string>(&generated)) {
        auto& declined = fused ? tally.declined_groups : tally.declined_singles;
        auto& entry = declined[*why];
        if (entry.count++ == 0) {
          entry.seed = seed;
          entry.group = ir::to_text(group.graph);
        }
        return;
      }
      (fused ? tally.fusion_generated : tally.singles_generated) += 1;
      const auto& kernel = std::get<GeneratedKernel>(generated);
      if (!compiled.insert(kernel.key()).second) return;
      CompileRequest request;
      request.source = kernel.source();
      request.kernel_name = kernel.name();
      request.target = CompileTarget{90, true};
      request.source_file_name = kernel.name() + ".cu";
      const auto nvrtc_start = Clock::now();
      try {
        EXPECT_FALSE(compile(request).binary.empty()) << where;
      } catch (const std::exception& error) {
        ADD_FAILURE() << "NVRTC rejected the kernel of " << (fused ? "a fusion group" : "a single node") << " of "
                      << where << "group:\n"
                      << ir::to_text(group.graph) << error.what() << "\nsource:\n"
                      << kernel.source();
      }
      nvrtc_seconds += std::chrono::duration<double>(Clock::now() - nvrtc_start).count();
    };
    for (const auto& [id, nodes] : groups) offer(nodes, true);
    for (const auto& nodes : singles) offer(nodes, false);
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();

  std::cout << "random kernels: " << kPrograms << " programs; fusion groups " << tally.fusion_groups << ", generated "
            << tally.fusion_generated << "; single nodes " << tally.singles << ", generated " << tally.singles_generated
            << "; " << compiled.size() << " distinct kernels compiled for sm_90 in " << nvrtc_seconds << " s (NVRTC), "
            << seconds << " s in all\n";
  for (const auto& [title, declined] : {std::make_pair("fusion groups", &tally.declined_groups),
                                        std::make_pair("single nodes", &tally.declined_singles)}) {
    for (const auto& [reason, entry] : *declined) {
      std::cout << "  declined " << title << " x" << entry.count << ": " << reason << "\n    first in seed "
                << entry.seed << ":\n"
                << entry.group;
    }
  }
  // Most programs have something to fuse; fewer groups would mean the fusion pass stopped
  // proposing them and everything above checked little.
  EXPECT_GE(tally.fusion_groups, kPrograms / 2);
  // The fusion pass only proposes what one kernel can run, and these programs hold only ops the
  // generators know: every group must generate (the declined reasons are printed above).
  EXPECT_EQ(tally.fusion_generated, tally.fusion_groups)
      << tally.fusion_generated << " of " << tally.fusion_groups << " fusion groups generated";
}

}  // namespace
}  // namespace zenith::cuda
