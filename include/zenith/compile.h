// The public API: zenith::compile and the CompiledModule it returns.
//
//   auto fast = zenith::compile(model);   // a torch::nn module holder, a torch::jit::Module or a callable
//   auto y = fast(x);                     // the same result as model->forward(x)
//
// A call is traced once per signature (dtypes, sizes, strides, devices, requires_grad, grad mode,
// training flag and the values of non-tensor arguments; the stride of a dimension of size 1 is
// not in it, as it places no element), optimized and partitioned over backend
// plugins; later calls with that signature replay the plan. Parameters and buffers are read live
// at every call, so an optimizer step between calls is seen. A call that needs gradients is one
// autograd node with a compiled backward (docs/training.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <ATen/core/ivalue.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/nn/pimpl.h>

#include "zenith/error.h"
#include "zenith/options.h"
#include "zenith/version.h"

namespace zenith {

namespace detail {

/// What the engine needs from the thing being compiled, type-erased.
struct ModuleAccess {
  /// Runs the original forward eagerly on boxed arguments.
  std::function<c10::IValue(const std::vector<c10::IValue>&)> forward;
  /// The live parameters and buffers with their qualified names (may be empty).
  std::function<std::vector<std::pair<std::string, at::Tensor>>()> state;
  /// The training flag (false when the thing has none).
  std::function<bool()> is_training;
  /// Number of arguments forward takes, or -1 when the C++ type system already enforces it.
  int arity = -1;
  /// Runs the forward for the tracer when that must differ from `forward`, or empty (use
  /// `forward`). A TorchScript module's graph executor may run parts of its graph as fused kernels
  /// the tracer cannot see; this runs every op through the dispatcher instead.
  std::function<c10::IValue(const std::vector<c10::IValue>&)> trace_forward = nullptr;
  /// Whether the parameters and buffers `state` returned last are still the module's, held where
  /// they were (none replaced, none added), or empty (`state` is then read at every call). It must
  /// be much cheaper than `state`: a TorchScript module's named_parameters walks every submodule by
  /// name. Tensors resized or moved in place are noticed all the same: the engine compares their
  /// types at every call.
  std::function<bool()> state_unchanged = nullptr;
  /// The forward has no control flow of its own (a module made by torch.jit.trace): a value it
  /// reads into C++ from sizes can only become an argument of a later op, which symbolic plans fit
  /// and check like any integer argument. Otherwise such a read keeps the plan to its exact sizes.
  bool straight_line = false;
};

class Engine;

/// Sets `access.state` and `access.state_unchanged` for a torch::nn module: the parameters and
/// buffers by qualified name, and a walk of the module tree that tells whether any was replaced
/// since they were read (defined in runtime/compile.cpp).
void set_module_state(ModuleAccess& access, std::shared_ptr<torch::nn::Module> module);

/// Creates the engine behind a CompiledModule (defined in capture/).
std::shared_ptr<Engine> make_engine(ModuleAccess access, CompileOptions options);
/// Runs one call through the engine.
c10::IValue engine_call(Engine& engine, std::vector<c10::IValue> args);
/// The report of the most recently compiled signature (empty before the first call).
CompileReport engine_last_report(const Engine& engine);
/// Plan cache counters.
CacheStats engine_stats(const Engine& engine);

template <typename T>
c10::IValue box_argument(T&& value) {
  using D = std::decay_t<T>;
  static_assert(std::is_same_v<D, at::Tensor> || std::is_same_v<D, bool> || std::is_integral_v<D> ||
                    std::is_floating_point_v<D> || std::is_same_v<D, c10::IValue>,
                "zenith::compile: forward arguments must be tensors, bools, integers or floating "
                "point numbers (non-tensor arguments become part of the signature)");
  if constexpr (std::is_integral_v<D> && !std::is_same_v<D, bool>) {
    return c10::IValue(static_cast<std::int64_t>(value));
  } else if constexpr (std::is_floating_point_v<D>) {
    return c10::IValue(static_cast<double>(value));
  } else {
    return c10::IValue(std::forward<T>(value));
  }
}

template <typename T>
T unbox_argument(const c10::IValue& value) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    return static_cast<T>(value.toInt());
  } else if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(value.toDouble());
  } else {
    return value.to<T>();
  }
}

template <typename R>
c10::IValue box_result(R&& result) {
  return c10::IValue(std::forward<R>(result));
}

template <typename R>
R unbox_result(c10::IValue value) {
  if constexpr (std::is_same_v<R, c10::IValue>) {
    return value;
  } else if constexpr (std::is_same_v<R, std::vector<at::Tensor>>) {
    return value.toTensorVector();
  } else {
    return std::move(value).to<R>();
  }
}

/// Member function signature of a forward, without class and qualifiers.
template <typename T>
struct method_signature;
template <typename C, typename R, typename... A>
struct method_signature<R (C::*)(A...)> {
  using type = R(std::decay_t<A>...);
};
template <typename C, typename R, typename... A>
struct method_signature<R (C::*)(A...) const> {
  using type = R(std::decay_t<A>...);
};

/// Call signature of a callable object or function pointer.
template <typename F, typename = void>
struct callable_signature;
template <typename R, typename... A>
struct callable_signature<R (*)(A...)> {
  using type = R(std::decay_t<A>...);
};
template <typename F>
struct callable_signature<F, std::void_t<decltype(&F::operator())>>
    : method_signature<decltype(&F::operator())> {};

/// Calls `f` with boxed arguments unboxed to the types of `Signature`, and boxes its result.
template <typename Signature>
struct BoxedInvoker;
template <typename R, typename... A>
struct BoxedInvoker<R(A...)> {
  static_assert(!std::is_void_v<R>, "zenith::compile: forward must return tensors");
  template <typename F>
  static c10::IValue call(F& f, const std::vector<c10::IValue>& args) {
    return call(f, args, std::index_sequence_for<A...>{});
  }
  template <typename F, std::size_t... I>
  static c10::IValue call(F& f, const std::vector<c10::IValue>& args, std::index_sequence<I...>) {
    return box_result(f(unbox_argument<A>(args[I])...));
  }
};

template <typename T>
constexpr bool is_module_holder_v = std::is_base_of_v<torch::detail::ModuleHolderIndicator, T>;

}  // namespace detail

template <typename Signature>
class CompiledModule;

/// A compiled module: call it like the original. Copies share the same plans.
template <typename R, typename... A>
class CompiledModule<R(A...)> {
 public:
  /// Wraps an engine; use zenith::compile to make one.
  explicit CompiledModule(std::shared_ptr<detail::Engine> engine) : engine_(std::move(engine)) {}

  /// Runs one call: the same result as the original forward.
  R operator()(A... args) const {
    std::vector<c10::IValue> boxed;
    boxed.reserve(sizeof...(A));
    (boxed.push_back(detail::box_argument(std::move(args))), ...);
    return detail::unbox_result<R>(detail::engine_call(*engine_, std::move(boxed)));
  }

  /// The report of the most recently compiled signature.
  CompileReport report() const { return detail::engine_last_report(*engine_); }

  /// Plan cache counters.
  CacheStats stats() const { return detail::engine_stats(*engine_); }

 private:
  std::shared_ptr<detail::Engine> engine_;
};

/// The compiled form of a TorchScript module: takes and returns what module.forward does.
template <>
class CompiledModule<c10::IValue(std::vector<c10::IValue>)> {
 public:
  /// Wraps an engine; use zenith::compile to make one.
  explicit CompiledModule(std::shared_ptr<detail::Engine> engine) : engine_(std::move(engine)) {}

  /// Runs one call: the same result as module.forward(inputs).
  c10::IValue operator()(std::vector<c10::IValue> inputs) const {
    return detail::engine_call(*engine_, std::move(inputs));
  }

  /// The report of the most recently compiled signature.
  CompileReport report() const { return detail::engine_last_report(*engine_); }

  /// Plan cache counters.
  CacheStats stats() const { return detail::engine_stats(*engine_); }

 private:
  std::shared_ptr<detail::Engine> engine_;
};

/// Compiles a torch::nn module holder (torch::nn::Linear, or your TORCH_MODULE). Its forward must
/// be one non-template method taking tensors (or bools, integers, doubles: these become part of
/// the signature) and returning a Tensor, a std::tuple of tensors or a std::vector of tensors.
template <typename Holder, std::enable_if_t<detail::is_module_holder_v<Holder>, int> = 0>
auto compile(Holder module, CompileOptions options = {}) {
  using Impl = typename Holder::ContainedType;
  using Signature = typename detail::method_signature<decltype(&Impl::forward)>::type;
  detail::ModuleAccess access{[module](const std::vector<c10::IValue>& args) mutable {
                                auto forward = [&](auto&&... a) { return module->forward(std::forward<decltype(a)>(a)...); };
                                return detail::BoxedInvoker<Signature>::call(forward, args);
                              },
                              nullptr, [module]() { return module->is_training(); }};
  detail::set_module_state(access, module.ptr());
  return CompiledModule<Signature>(detail::make_engine(std::move(access), std::move(options)));
}

/// Compiles a TorchScript module (for example one loaded with torch::jit::load). The result takes
/// and returns what module.forward takes and returns.
CompiledModule<c10::IValue(std::vector<c10::IValue>)> compile(torch::jit::Module module,
                                                                 CompileOptions options = {});

/// Compiles a function of tensors (a lambda or a function pointer). Tensors it closes over become
/// constants of the trace: their values when a signature is first compiled are the ones used
/// (compile a module instead when they change).
template <typename F,
          std::enable_if_t<!detail::is_module_holder_v<std::decay_t<F>> &&
                               !std::is_same_v<std::decay_t<F>, torch::jit::Module>,
                           int> = 0>
auto compile(F fn, CompileOptions options = {}) {
  using Fn = std::conditional_t<std::is_function_v<std::remove_pointer_t<F>>, std::decay_t<F>, F>;
  using Signature = typename detail::callable_signature<Fn>::type;
  return CompiledModule<Signature>(detail::make_engine(
      detail::ModuleAccess{
          [fn](const std::vector<c10::IValue>& args) mutable {
            return detail::BoxedInvoker<Signature>::call(fn, args);
          },
          nullptr, nullptr},
      std::move(options)));
}

}  // namespace zenith
