#include "backends/cuda/cuda_architecture.h"

#include <nvrtc.h>

#include <algorithm>
#include <optional>

#include "zenith/error.h"

namespace zenith::cuda {

namespace {

std::string arch_name(const char* prefix, int arch) { return prefix + std::to_string(arch); }

void check_nvrtc(nvrtcResult result, const char* call) {
  if (result != NVRTC_SUCCESS) {
    throw Error(std::string("NVRTC call ") + call + " failed: " + nvrtcGetErrorString(result) +
                ". Check that libnvrtc and libnvrtc-builtins come from the same CUDA toolkit.");
  }
}

std::vector<int> query_supported_architectures() {
  int count = 0;
  check_nvrtc(nvrtcGetNumSupportedArchs(&count), "nvrtcGetNumSupportedArchs");
  std::vector<int> archs(static_cast<std::size_t>(count));
  if (count > 0) check_nvrtc(nvrtcGetSupportedArchs(archs.data()), "nvrtcGetSupportedArchs");
  std::sort(archs.begin(), archs.end());
  return archs;
}

// Rule 2 of choose_target: SASS runs on the same major at an equal or higher minor.
std::optional<int> newest_binary_compatible(ComputeCapability device, const std::vector<int>& sorted) {
  for (auto it = sorted.rbegin(); it != sorted.rend(); ++it) {
    if (*it / 10 == device.major && *it % 10 <= device.minor) return *it;
  }
  return std::nullopt;
}

// Rule 3 of choose_target: the driver JITs PTX to any newer architecture.
std::optional<int> newest_below(int device_arch, const std::vector<int>& sorted) {
  auto it = std::lower_bound(sorted.begin(), sorted.end(), device_arch);
  if (it == sorted.begin()) return std::nullopt;
  return *std::prev(it);
}

Error too_old(ComputeCapability device, int oldest) {
  return Error("CUDA device of compute capability " + device.to_string() +
               " is older than every architecture this NVRTC supports (its oldest is " + arch_name("sm_", oldest) +
               "), so the JIT CUDA backend cannot compile kernels for it. Use a CUDA toolkit whose NVRTC still "
               "supports " + arch_name("sm_", device.arch()) +
               " (put its libnvrtc first on the library path), or leave the JIT CUDA backend out of "
               "ZENITH_BACKENDS so this device runs on another backend.");
}

}  // namespace

std::string ComputeCapability::to_string() const { return std::to_string(major) + "." + std::to_string(minor); }

std::string CompileTarget::option() const { return "-arch=" + arch_name(cubin ? "sm_" : "compute_", arch); }

std::string CompileTarget::to_string() const {
  return cubin ? arch_name("sm_", arch) + " (CUBIN)" : arch_name("compute_", arch) + " (PTX)";
}

std::vector<int> nvrtc_supported_architectures() {
  // The list belongs to the loaded library and cannot change while the process runs.
  static const std::vector<int> archs = query_supported_architectures();
  return archs;
}

CompileTarget choose_target(ComputeCapability device, const std::vector<int>& supported) {
  if (supported.empty()) {
    throw Error("NVRTC reports no supported GPU architectures; the libnvrtc found at run time is broken or not "
                "from a CUDA toolkit. Reinstall the CUDA toolkit or point the library path at a complete one.");
  }
  std::vector<int> sorted = supported;
  std::sort(sorted.begin(), sorted.end());
  const int device_arch = device.arch();
  if (device_arch < sorted.front()) throw too_old(device, sorted.front());
  if (auto same_major = newest_binary_compatible(device, sorted)) return CompileTarget{*same_major, true};
  if (auto older = newest_below(device_arch, sorted)) return CompileTarget{*older, false};
  // Unreachable: device_arch >= sorted.front() and no exact match leaves an older entry.
  throw too_old(device, sorted.front());
}

}  // namespace zenith::cuda
