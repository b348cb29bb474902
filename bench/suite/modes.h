// The C++ modes a case runs in, each turned into one callable shape, Tensors -> Tensors, so that the
// measuring code is the same for all: eager LibTorch, TorchScript (a Python trace, frozen and
// optimized here), Zenith and AOTInductor (a package compiled in Python, run here).
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <ATen/core/ivalue.h>
#include <nlohmann/json.hpp>
#include <torch/types.h>

#include "zenith/compile.h"

namespace zenith::bench {

using Tensors = std::vector<at::Tensor>;
using Call = std::function<Tensors(const Tensors&)>;

/// A mode ready to call, and what it can tell about itself after the calls (Zenith's plan).
struct Mode {
  Call call;
  std::function<nlohmann::json()> info;
};

/// A mode by name, made when the case gets to it, so that its setup is timed and its failure
/// recorded against it.
struct ModeMaker {
  std::string name;
  std::function<Mode()> make;
};

inline Tensors as_tensors(const at::Tensor& t) { return {t}; }
template <typename... T>
Tensors as_tensors(const std::tuple<T...>& tuple) {
  return std::apply([](const auto&... t) { return Tensors{t...}; }, tuple);
}
/// A TorchScript result: a tensor or a tuple of tensors.
Tensors as_tensors(const c10::IValue& value);

template <typename F, std::size_t... I>
Tensors call_unpacked(F& f, const Tensors& in, std::index_sequence<I...>) {
  return as_tensors(f(in[I]...));
}

/// Adapts a function of N tensors (a module's forward, a CompiledModule) to a Call.
template <std::size_t N, typename F>
Call call_with(F f) {
  return [f](const Tensors& in) mutable {
    TORCH_CHECK(in.size() == N, "expected ", N, " inputs, got ", in.size());
    return call_unpacked(f, in, std::make_index_sequence<N>{});
  };
}

/// A TorchScript module traced in Python: loaded onto `device`, put in eval mode, frozen
/// (parameters become constants) and run through optimize_for_inference, as the peers do.
Call torchscript_call(const std::string& path, const torch::Device& device);

/// An AOTInductor package compiled in Python, loaded with AOTIModelPackageLoader.
Call aoti_call(const std::string& path, const torch::Device& device);

/// What Zenith did with the last signature it compiled and its plan cache, for the results.
template <typename Compiled>
nlohmann::json zenith_info(const Compiled& fast) {
  const auto report = fast.report();
  const auto stats = fast.stats();
  return {{"groups", report.groups},
          {"nodes_per_backend", report.nodes_per_backend},
          {"eager_fallback", report.eager_fallback},
          {"fallback_reason", report.fallback_reason},
          {"last_compile_ms", report.total_ms},
          {"plan_hits", stats.hits},
          {"plan_misses", stats.misses},
          {"recaptures", stats.recaptures},
          {"evictions", stats.evictions},
          {"eager_calls", stats.eager_calls},
          {"symbolic_plans", stats.symbolic_plans},
          {"instantiations", stats.instantiations},
          {"instantiation_ms", stats.instantiation_ms},
          {"kernels_compiled", stats.kernels_compiled},
          {"kept_mb", static_cast<double>(stats.kept_bytes) / (1 << 20)},
          {"packed_mb", static_cast<double>(stats.packed_bytes) / (1 << 20)}};
}

/// Options the suite compiles with: errors instead of a silent eager fallback, so that a mode that
/// cannot compile shows as failed.
zenith::CompileOptions zenith_options(const std::string& name);

}  // namespace zenith::bench
