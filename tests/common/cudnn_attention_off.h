// Keeps PyTorch's cuDNN attention backend off for a scope, restoring the user's setting after.
//
// Why: for a query whose every key is masked by a bool mask, PyTorch's own attention backends
// disagree. The math and memory-efficient backends (and the CPU) give 0, PyTorch's convention
// since 2.5 and what Zenith's attention kernel gives; the cuDNN backend, eager's first choice for
// 16-bit inputs on sm_90 with cuDNN 9.15 or later, fills a bool mask's hidden keys with a finite
// -65504 and so gives that row the attention over every key, as if it had no mask (PyTorch 2.11,
// cuDNN 9.19, on an H100 and an H200; upstream's pytorch#177842). Tests of such rows compare
// with eager under this guard, and say so.
#pragma once

#include <ATen/Context.h>

namespace zenith::testing {

class CudnnAttentionOff {
 public:
  CudnnAttentionOff() : was_enabled_(at::globalContext().userEnabledCuDNNSDP()) {
    at::globalContext().setSDPUseCuDNN(false);
  }
  ~CudnnAttentionOff() { at::globalContext().setSDPUseCuDNN(was_enabled_); }
  CudnnAttentionOff(const CudnnAttentionOff&) = delete;
  CudnnAttentionOff& operator=(const CudnnAttentionOff&) = delete;

 private:
  bool was_enabled_;
};

}  // namespace zenith::testing
