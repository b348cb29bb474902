#include "common/cuda_kernel_check.h"

#include <algorithm>
#include <chrono>
#include <sstream>
#include <vector>

#include <gtest/gtest.h>

#include "backends/cuda/kernel_codegen.h"
#include "backends/cuda/nvrtc_compiler.h"
#include "core/group.h"
#include "core/op_registry.h"
#include "core/printer.h"
#include "core/row_reduction.h"
#include "passes/matmul_epilogue.h"
#include "passes/pass_manager.h"
#include "zenith/options.h"

namespace zenith::testing {
namespace {

using cuda::CompileRequest;
using cuda::CompileTarget;
using cuda::GeneratedKernel;

bool is_attention(const ir::Node& node) { return node.op == "aten::scaled_dot_product_attention"; }

// What the JIT backend is offered besides fusion groups: a node alone that it could run.
bool kernel_candidate(const ir::Graph& graph, const ir::Node& node) {
  auto category = ir::op_info(node.op).category;
  return category == ir::OpCategory::Elementwise || is_attention(node) ||
         (category == ir::OpCategory::Reduction && ir::row_reduction(graph, node).has_value());
}

bool holds_integers(const ir::Graph& group) {
  return std::any_of(group.values.begin(), group.values.end(), [](const auto& value) {
    return value && at::isIntegralType(value->type.dtype, /*includeBool=*/false);
  });
}

void compile_kernel(const GeneratedKernel& kernel, const std::string& where, const ir::Graph& group,
                    KernelTally& tally) {
  if (!tally.compiled.insert(kernel.key()).second) return;
  CompileRequest request;
  request.source = kernel.source();
  request.kernel_name = kernel.name();
  request.target = CompileTarget{90, true};
  request.source_file_name = kernel.name() + ".cu";
  const auto start = std::chrono::steady_clock::now();
  try {
    EXPECT_FALSE(cuda::compile(request).binary.empty()) << where;
  } catch (const std::exception& error) {
    ADD_FAILURE() << "NVRTC rejected a kernel of " << where << "; group:\n"
                  << ir::to_text(group) << error.what() << "\nsource:\n"
                  << kernel.source();
  }
  tally.nvrtc_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

std::string KernelTally::to_string() const {
  std::ostringstream out;
  out << "fusion groups " << fusion_groups << ", generated " << fusion_generated << " (integer ones declined "
      << integer_groups_declined << "); matrix-product groups " << matmul_groups << "; single nodes " << singles
      << ", generated " << singles_generated << " (attention " << attention_singles << ", generated "
      << attention_generated << "); " << compiled.size() << " distinct kernels compiled for sm_90 in "
      << nvrtc_seconds << " s (NVRTC)\n";
  for (const auto& [title, declined] :
       {std::make_pair("fusion groups", &declined_groups), std::make_pair("single nodes", &declined_singles)}) {
    for (const auto& [reason, entry] : *declined) {
      out << "  declined " << title << " x" << entry.count << ": " << reason << "\n    first in " << entry.where
          << ":\n"
          << entry.group;
    }
  }
  return out.str();
}

void check_cuda_kernels(ir::Graph graph, const std::string& where, KernelTally& tally) {
  for (auto& value : graph.values) {
    if (value) value->type.device = c10::Device(c10::kCUDA, 0);
  }
  passes::PassManager::default_pipeline(CompileOptions{}, /*inference=*/true).run(graph);

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
    if (fused && passes::starts_matmul_group(graph.nodes[static_cast<std::size_t>(nodes.front())])) {
      ++tally.matmul_groups;
      return;
    }
    auto group = ir::extract_group(graph, nodes, consumers);
    auto generated = cuda::generate_kernel(group.graph);
    (fused ? tally.fusion_groups : tally.singles) += 1;
    const bool attention = !fused && is_attention(graph.nodes[static_cast<std::size_t>(nodes.front())]);
    tally.attention_singles += attention;
    if (const auto* why = std::get_if<std::string>(&generated)) {
      if (fused && holds_integers(group.graph)) ++tally.integer_groups_declined;
      auto& entry = (fused ? tally.declined_groups : tally.declined_singles)[*why];
      if (entry.count++ == 0) {
        entry.where = where;
        entry.group = ir::to_text(group.graph);
      }
      return;
    }
    (fused ? tally.fusion_generated : tally.singles_generated) += 1;
    tally.attention_generated += attention;
    compile_kernel(std::get<GeneratedKernel>(generated), where + (fused ? ", a fusion group" : ", a single node"),
                   group.graph, tally);
  };
  for (const auto& [id, nodes] : groups) offer(nodes, true);
  for (const auto& nodes : singles) offer(nodes, false);
}

}  // namespace zenith::testing
