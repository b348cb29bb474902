#include "backends/cuda/nvrtc_compiler.h"

#include <nvrtc.h>
#include <unistd.h>

#if defined(__linux__)
#include <link.h>
#endif

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "zenith/error.h"

namespace zenith::cuda {

namespace {

namespace fs = std::filesystem;

// Enough for the first errors, which are the ones that matter; a template error cascade can run
// to megabytes and would bury them.
constexpr std::size_t kLogLimit = 4000;

// Owns one nvrtcProgram so that every path out of compile(), exceptions included, destroys it.
class Program {
 public:
  Program(const std::string& source, const std::string& name);
  // The result is ignored: a failed destroy can only leak, and a destructor must not throw.
  ~Program() { nvrtcDestroyProgram(&program_); }
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;

  nvrtcProgram get() const { return program_; }

 private:
  nvrtcProgram program_ = nullptr;
};

void check(nvrtcResult result, const char* call, const std::string& program_name) {
  if (result == NVRTC_SUCCESS) return;
  throw Error(std::string("NVRTC call ") + call + " failed for " + program_name + ": " + nvrtcGetErrorString(result) +
              ". Check that libnvrtc and libnvrtc-builtins come from the same CUDA toolkit.");
}

Program::Program(const std::string& source, const std::string& name) {
  check(nvrtcCreateProgram(&program_, source.c_str(), name.c_str(), 0, nullptr, nullptr), "nvrtcCreateProgram",
        name);
}

bool has_fp16_headers(const fs::path& folder) {
  std::error_code ec;
  return fs::is_regular_file(folder / "cuda_fp16.h", ec) && fs::is_regular_file(folder / "cuda_bf16.h", ec);
}

// The file libnvrtc was loaded from; its toolkit's headers are the ones that match the compiler.
std::string loaded_nvrtc_path() {
  std::string found;
#if defined(__linux__)
  dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* data) {
        const std::string path = info->dlpi_name ? info->dlpi_name : "";
        // "libnvrtc.so.13" or "libnvrtc.alt.so.13", but not "libnvrtc-builtins.so.13".
        if (fs::path(path).filename().string().rfind("libnvrtc.", 0) != 0) return 0;
        *static_cast<std::string*>(data) = path;
        return 1;
      },
      &found);
#endif
  return found;
}

std::vector<fs::path> include_candidates() {
  std::vector<fs::path> candidates;
  if (auto library = loaded_nvrtc_path(); !library.empty()) {
    const fs::path folder = fs::path(library).parent_path();
    candidates.push_back(folder.parent_path() / "include");  // <toolkit>/lib64 and pip's nvidia/cu13/lib
    std::error_code ec;
    const fs::path real = fs::canonical(folder, ec);  // lib64 -> targets/x86_64-linux/lib
    if (!ec) candidates.push_back(real.parent_path() / "include");
  }
  for (const char* variable : {"CUDA_HOME", "CUDA_PATH"}) {
    if (const char* value = std::getenv(variable); value && *value) candidates.push_back(fs::path(value) / "include");
  }
#ifdef ZENITH_CUDA_BUILD_INCLUDE_DIR
  candidates.emplace_back(ZENITH_CUDA_BUILD_INCLUDE_DIR);
#endif
  candidates.emplace_back("/usr/local/cuda/include");
  return candidates;
}

std::string find_include_folder() {
  for (const auto& candidate : include_candidates()) {
    if (has_fp16_headers(candidate)) return candidate.lexically_normal().string();
  }
  return {};
}

std::string program_name(const CompileRequest& request) {
  // Without a name the log would say "default_program(3): error", which points nowhere.
  return request.source_file_name.empty() ? request.kernel_name + ".cu" : request.source_file_name;
}

// Distinct per process and thread, so that concurrent writers of one key never share a temporary.
std::string temporary_suffix() {
  return ".tmp." + std::to_string(::getpid()) + "." +
         std::to_string(std::hash<std::thread::id>{}(std::this_thread::get_id()));
}

// Written through a temporary and a rename so that a reader never sees half a file.
std::string write_source(const CompileRequest& request, const std::string& name) {
  if (request.dump_folder.empty()) return {};
  std::error_code ec;
  fs::create_directories(request.dump_folder, ec);
  if (ec) {
    throw Error("cannot create the dump folder " + request.dump_folder + " for kernel sources: " + ec.message() +
                ". Point ZENITH_DUMP_DIR at a writable folder or unset it.");
  }
  fs::path path = fs::path(request.dump_folder) / name;
  if (auto absolute = fs::absolute(path, ec); !ec) path = absolute;
  const std::string temporary = path.string() + temporary_suffix();
  {
    std::ofstream out(temporary, std::ios::binary);
    out.write(request.source.data(), static_cast<std::streamsize>(request.source.size()));
    if (!out) throw Error("cannot write the kernel source " + temporary + ": check that the folder is writable");
  }
  fs::rename(temporary, path, ec);
  if (ec) throw Error("cannot rename " + temporary + " to " + path.string() + ": " + ec.message());
  return path.string();
}

std::string program_log(nvrtcProgram program, const std::string& name) {
  std::size_t size = 0;
  check(nvrtcGetProgramLogSize(program, &size), "nvrtcGetProgramLogSize", name);
  std::string log(size, '\0');
  if (size > 0) check(nvrtcGetProgramLog(program, log.data()), "nvrtcGetProgramLog", name);
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  return log;
}

std::string trimmed(const std::string& log) {
  if (log.empty()) return "(NVRTC's log is empty)";
  if (log.size() <= kLogLimit) return log;
  std::size_t cut = log.rfind('\n', kLogLimit);
  if (cut == std::string::npos || cut == 0) cut = kLogLimit;
  return log.substr(0, cut) + "\n[... " + std::to_string(log.size() - cut) + " more characters of the log left out]";
}

Error compile_error(const CompileRequest& request, const std::string& written, nvrtcResult result,
                    const std::string& log) {
  const std::string where =
      written.empty() ? "not written (no dump folder); set ZENITH_DUMP_DIR=<folder> to keep each generated kernel "
                        "there as " + program_name(request)
                      : written;
  return Error("NVRTC could not compile kernel " + request.kernel_name + " for " + request.target.to_string() + ": " +
               nvrtcGetErrorString(result) + ".\nGenerated source: " + where + "\nNVRTC log:\n" + trimmed(log));
}

// The last -arch wins in NVRTC, and extra_options may override the target's, so the output kind
// follows the options actually passed.
bool produces_cubin(const std::vector<std::string>& options) {
  bool cubin = false;
  for (const auto& option : options) {
    for (const char* prefix : {"-arch=", "--gpu-architecture="}) {
      if (option.rfind(prefix, 0) == 0) cubin = option.compare(std::strlen(prefix), 3, "sm_") == 0;
    }
  }
  return cubin;
}

std::vector<char> fetch_output(nvrtcProgram program, bool cubin, const std::string& name) {
  std::size_t size = 0;
  check(cubin ? nvrtcGetCUBINSize(program, &size) : nvrtcGetPTXSize(program, &size),
        cubin ? "nvrtcGetCUBINSize" : "nvrtcGetPTXSize", name);
  if (size == 0) throw Error("NVRTC compiled " + name + " but returned an empty " + (cubin ? "CUBIN" : "PTX"));
  std::vector<char> binary(size);
  check(cubin ? nvrtcGetCUBIN(program, binary.data()) : nvrtcGetPTX(program, binary.data()),
        cubin ? "nvrtcGetCUBIN" : "nvrtcGetPTX", name);
  return binary;
}

int query_version() {
  int major = 0;
  int minor = 0;
  check(nvrtcVersion(&major, &minor), "nvrtcVersion", "the version query");
  return major * 1000 + minor * 10;
}

}  // namespace

int nvrtc_version() {
  static const int version = query_version();
  return version;
}

const std::string& cuda_include_folder() {
  static const std::string folder = find_include_folder();
  return folder;
}

std::vector<std::string> standard_options(const CompileTarget& target) {
  std::vector<std::string> options = {
      target.option(),
      // Pinned rather than left to NVRTC's default (c++17 in 13.0), which moves between releases
      // and would silently change what generated code may use.
      "--std=c++17",
      // Generated helper functions need no __device__ on each of them.
      "-default-device",
      // NVRTC's default, stated so the numerics mode is part of the option list (and so of any
      // cache key built from it). Contraction changes rounding against eager; a parity mode
      // appends --fmad=false, which wins because it comes later.
      "--fmad=true",
      // Device-side assert costs registers and a branch per check in every generated kernel.
      "-DNDEBUG",
  };
  // Drops textures, device runtime and device-side launch, none of which generated kernels use:
  // 15-20% off each compile with NVRTC 13.0 (18 vs 21 ms plain, 27 vs 33 ms with cuda_fp16.h).
  if (nvrtc_version() >= 12040) options.emplace_back("--minimal");
  if (const std::string& folder = cuda_include_folder(); !folder.empty()) options.push_back("-I" + folder);
  return options;
}

CompiledBinary compile(const CompileRequest& request) {
  const auto start = std::chrono::steady_clock::now();
  const std::string name = program_name(request);
  const std::string written = write_source(request, name);

  std::vector<std::string> options = standard_options(request.target);
  options.insert(options.end(), request.extra_options.begin(), request.extra_options.end());
  std::vector<const char*> arguments;
  arguments.reserve(options.size());
  for (const auto& option : options) arguments.push_back(option.c_str());

  Program program(request.source, name);
  const nvrtcResult result =
      nvrtcCompileProgram(program.get(), static_cast<int>(arguments.size()), arguments.data());
  CompiledBinary compiled;
  compiled.log = program_log(program.get(), name);
  if (result != NVRTC_SUCCESS) throw compile_error(request, written, result, compiled.log);

  const bool cubin = produces_cubin(options);
  compiled.binary = fetch_output(program.get(), cubin, name);
  compiled.kind = cubin ? "cubin" : "ptx";
  compiled.milliseconds =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return compiled;
}

}  // namespace zenith::cuda
