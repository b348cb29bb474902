// NVRTC wrapper of the JIT CUDA backend: generated CUDA C++ in, CUBIN or PTX out. It knows
// nothing about graphs or LibTorch, so it can be tested on machines without a GPU (NVRTC needs
// none). Every function is safe to call from several threads at once: each compile owns its
// NVRTC program, and the only shared state is the cached version, architecture list and include
// folder, each computed once.
#pragma once

#include <string>
#include <vector>

#include "backends/cuda/cuda_architecture.h"

namespace zenith::cuda {

struct CompileRequest {
  /// The whole translation unit.
  std::string source;
  /// The extern "C" __global__ function to load later. extern "C" keeps the symbol unmangled, so
  /// the caller finds it with cuModuleGetFunction without asking NVRTC for the lowered name.
  std::string kernel_name;
  CompileTarget target;
  /// Appended after standard_options(), so they can override them: NVRTC honours the last of
  /// repeated options (e.g. "--fmad=false" for a bit-parity mode, "-lineinfo" for profiling).
  std::vector<std::string> extra_options;
  /// "zenith_k_<digest>.cu": the NVRTC program name (what the log's "file(line): error" names)
  /// and the dump file's name. Named by the kernel's key so that the output is deterministic.
  std::string source_file_name;
  /// Folder the source is written to before compiling; empty writes nothing.
  std::string dump_folder;
};

struct CompiledBinary {
  /// A CUBIN (an ELF image), or PTX text including its terminating NUL so that binary.data() can
  /// go straight to cuModuleLoadData.
  std::vector<char> binary;
  /// "cubin" or "ptx".
  std::string kind;
  /// NVRTC's log; usually empty, warnings otherwise.
  std::string log;
  /// Wall time of the whole compile, from program creation to fetching the output.
  double milliseconds = 0.0;
};

/// Compiles request.source with standard_options(request.target) plus request.extra_options.
///
/// With a dump folder, the source is written as <dump_folder>/<source_file_name> before NVRTC
/// runs, so that a compile that crashes the process still leaves it behind. A compile error
/// throws zenith::Error naming that file (or saying how to get one: set ZENITH_DUMP_DIR) and
/// quoting NVRTC's log, trimmed to about 4000 characters. Also throws zenith::Error when the
/// dump folder cannot be written or when any other NVRTC call fails.
CompiledBinary compile(const CompileRequest& request);

/// The loaded NVRTC's version as CUDA numbers it: major * 1000 + minor * 10 (13.0 -> 13000).
int nvrtc_version();

/// The options every Zenith kernel is compiled with; see nvrtc_compiler.cpp for why each is there.
std::vector<std::string> standard_options(const CompileTarget& target);

/// The folder holding cuda_fp16.h and cuda_bf16.h that standard_options() passes with -I, found
/// at run time; empty when none was found (kernels that include neither still compile).
///
/// NVRTC 13.0 does not have these headers built in: including <cuda_fp16.h> without -I fails
/// with "could not open source file" (checked on this machine). Searched in order: the include
/// folder beside the loaded libnvrtc (its own toolkit, so the headers match the compiler),
/// $CUDA_HOME/include, $CUDA_PATH/include, the toolkit found when Zenith was built, and
/// /usr/local/cuda/include.
const std::string& cuda_include_folder();

}  // namespace zenith::cuda
