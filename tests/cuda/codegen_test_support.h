// Shared by the code-generator tests, which run without a GPU: CUDA-typed graphs built on the CPU,
// and NVRTC compiles of generated kernels for sm_90.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include <ATen/core/Tensor.h>
#include <dlpack/dlpack.h>

#include "backends/cuda/kernel_codegen.h"
#include "backends/cuda/nvrtc_compiler.h"
#include "core/graph.h"

namespace zenith::cuda::codegen_test {

/// The graph with every value on cuda:0. Graph builders learn types by running ops on CPU tensors;
/// a CUDA group differs only in device.
inline ir::Graph on_cuda(ir::Graph graph) {
  for (auto& v : graph.values)
    if (v) v->type.device = c10::Device(c10::kCUDA, 0);
  return graph;
}

/// A DLTensor over a CPU tensor's data, shape and strides (the tensor must outlive it), for
/// checking how launch arguments are packed.
inline DLTensor view(const at::Tensor& t) {
  DLTensor d{};
  d.data = t.data_ptr();
  d.ndim = static_cast<int>(t.dim());
  d.shape = const_cast<std::int64_t*>(t.sizes().data());
  d.strides = const_cast<std::int64_t*>(t.strides().data());
  return d;
}

/// Compiles `source` for sm_90 with the plugin's own options; a test failure quoting the source
/// and NVRTC's log when it does not compile.
inline void expect_compiles(const std::string& source, const std::string& kernel_name) {
  if (source.empty()) return;  // generation already failed, and said so
  CompileRequest request;
  request.source = source;
  request.kernel_name = kernel_name;
  request.target = CompileTarget{90, true};
  request.source_file_name = kernel_name + ".cu";
  try {
    EXPECT_FALSE(compile(request).binary.empty());
  } catch (const std::exception& error) {
    ADD_FAILURE() << error.what() << "\n" << source;
  }
}

/// The kernel of kind `Kernel` generate_kernel makes for `graph`; a test failure (and an empty
/// kernel) when it declines the group or makes another kind, or when it says it may be launched
/// as a programmatic dependent launch and its first statement does not wait (or the other way).
template <typename Kernel>
Kernel generated_kernel(const ir::Graph& graph) {
  auto generated = generate_kernel(graph);
  if (const auto* why = std::get_if<std::string>(&generated)) {
    ADD_FAILURE() << "not generated: " << *why;
    return {};
  }
  const auto& whole = std::get<GeneratedKernel>(generated);
  // Launched as a programmatic dependent launch in a plan's graph (backends/cuda/
  // programmatic_launch.h), a kernel that read anything before waiting for the kernel before it
  // could read what that one is still writing.
  const bool waits_first = whole.source().find("(const Args p) {\n  zn_follow_kernel_before();\n") != std::string::npos;
  EXPECT_EQ(whole.follows_kernel_before(), waits_first) << whole.source();
  const auto* kernel = std::get_if<Kernel>(&whole.kernel);
  if (kernel == nullptr) {
    ADD_FAILURE() << "generated another kind of kernel than the one expected";
    return {};
  }
  return *kernel;
}

/// Why generate_kernel declines `graph`, or "(generated)".
inline std::string refusal(const ir::Graph& graph) {
  auto generated = generate_kernel(graph);
  const auto* why = std::get_if<std::string>(&generated);
  return why ? *why : "(generated)";
}

}  // namespace zenith::cuda::codegen_test
