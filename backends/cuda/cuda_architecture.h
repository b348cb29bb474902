// Which GPU architecture the JIT CUDA backend asks NVRTC for, derived from the device's compute
// capability and the list NVRTC reports at run time. There is deliberately no hand-written
// architecture table: tables went stale on every new GPU generation in other fusers (pytorch
// #47658, #87595), while NVRTC always knows what it supports.
#pragma once

#include <string>
#include <vector>

namespace zenith::cuda {

/// A device's compute capability, as cudaDeviceProp / cuDeviceGetAttribute report it (9.0 on H200).
struct ComputeCapability {
  int major = 0;
  int minor = 0;

  /// NVRTC's numbering: major * 10 + minor (9.0 -> 90, 12.1 -> 121).
  int arch() const { return major * 10 + minor; }
  /// "9.0".
  std::string to_string() const;
};

/// What NVRTC compiles to: a CUBIN for sm_<arch>, or PTX for the virtual compute_<arch>.
struct CompileTarget {
  int arch = 0;
  bool cubin = true;

  /// "-arch=sm_90" for a CUBIN, "-arch=compute_90" for PTX.
  std::string option() const;
  /// "sm_90 (CUBIN)" or "compute_90 (PTX)", for messages and logs.
  std::string to_string() const;

  bool operator==(const CompileTarget& other) const { return arch == other.arch && cubin == other.cubin; }
  bool operator!=(const CompileTarget& other) const { return !(*this == other); }
};

/// The architectures the loaded NVRTC can compile for (nvrtcGetSupportedArchs), sorted ascending,
/// e.g. {75, 80, 86, 87, 88, 89, 90, 100, 103, 110, 120, 121} for NVRTC 13.0. Queried once per
/// process; throws zenith::Error when NVRTC fails to answer.
std::vector<int> nvrtc_supported_architectures();

/// Picks the target for `device` from `supported` (NVRTC's list; need not be sorted).
///
/// The rule follows CUDA's compatibility guarantees rather than a table:
///  1. NVRTC lists the device's own architecture: a CUBIN for it (no driver JIT at load time).
///  2. Otherwise a CUBIN for the newest listed architecture with the same major and a minor not
///     above the device's: SASS is binary compatible within a major version towards higher minors
///     (sm_86 runs on 8.7), never across majors.
///  3. Otherwise PTX for the newest listed architecture below the device, which the driver JITs
///     forward at load time. This covers a device newer than the whole toolkit (a future 15.0 gets
///     compute_121 from NVRTC 13.0). Loading that PTX needs a driver at least as new as NVRTC;
///     the caller checks that with cuDriverGetVersion, since PTX from a newer toolkit fails on an
///     older driver with CUDA_ERROR_UNSUPPORTED_PTX_VERSION.
///  4. The device is older than every listed architecture (7.0 with NVRTC 13, whose oldest is 75):
///     nothing this NVRTC emits can run there, so it throws zenith::Error saying so and what to do.
///
/// The architecture-specific variants (sm_90a, sm_100a) and family variants (sm_100f) are never
/// chosen: code built for them runs only on that exact architecture (or family) and is not forward
/// compatible, and the fused elementwise/reduction kernels Zenith generates need no wgmma or TMA.
/// A kernel that does emit them appends "-arch=sm_90a" to CompileRequest::extra_options (NVRTC
/// honours the last -arch given; checked with NVRTC 13.0).
CompileTarget choose_target(ComputeCapability device, const std::vector<int>& supported);

}  // namespace zenith::cuda
