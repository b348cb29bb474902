// A symbolic plan: one compiled plan whose sizes, strides and shape arguments are polynomials in
// the symbolic dimensions, instantiated for each new size without capture, passes or compiles.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "runtime/plan_slots.h"
#include "runtime/signature.h"
#include "runtime/size_polynomial.h"
#include "core/plan.h"
#include "zenith/options.h"

namespace zenith {
class DerivedValues;
}

namespace zenith::capture {

/// "argument 0 dim 1, argument 2 dim 3".
std::string describe_dims(const std::vector<DynamicDim>& dims);

/// As describe_dims, joining dims that share a symbol: "argument 1 dim 3 = argument 2 dim 3".
std::string describe_symbols(const std::vector<DynamicDim>& dims, const std::vector<int>& symbol_of);

/// Marks the nodes of `captures` (the same forward captured at `design.points`, in that order)
/// whose integer arguments change with the sizes (ir::Node::size_dependent). Returns why the
/// captures cannot share one plan, or empty.
std::string mark_size_dependent(std::vector<ir::Graph*> captures, const ProbeDesign& design);

/// What instantiating a symbolic plan gave.
struct Instance {
  /// The plan for the new sizes, or null when the symbolic plan cannot serve them.
  std::shared_ptr<const Plan> plan;
  /// Why not, when plan is null.
  std::string refusal;
  /// Kernels the backends compiled to serve it (groups whose shape arguments changed, kernels that
  /// are not shape-generic or serve too few elements); all others are shared with the base plan.
  std::int64_t kernels_compiled = 0;
};

class SymbolicPlan {
 public:
  /// Fits a symbolic plan from plans compiled at `design.points` (plans[0] at the base, which it
  /// keeps); dims[k] has the size of symbol symbol_of[k]. `signature` is the base call's;
  /// `tensor_arguments` the call positions of the graph's tensor inputs, in order. Returns why not
  /// when the plans differ in more than integers or an integer follows no polynomial.
  static std::variant<SymbolicPlan, std::string> fit(std::vector<DynamicDim> dims, std::vector<int> symbol_of,
                                                      const ProbeDesign& design,
                                                      Signature signature, std::vector<int> tensor_arguments,
                                                      const std::vector<std::shared_ptr<const Plan>>& plans);

  /// The plan for a call with `signature`, or why this symbolic plan cannot serve it (another
  /// dtype or rank, a non-symbolic size changed, a size crossing 1, a guard of a kernel).
  /// `backend_options` is passed to the compiles it needs.
  Instance instantiate(const Signature& signature, const std::string& backend_options) const;

  /// The symbolic dims, described with their shared symbols.
  std::string describe() const { return describe_symbols(dims_, symbol_of_); }

  /// The plan it was fitted from: every instance is a copy with other sizes, which keeps its steps
  /// and value ids.
  const std::shared_ptr<const Plan>& base() const { return base_; }

  /// What the base plan and every instance compute from parameters alone, kept once for all of
  /// them (runtime/derived_values.h; the engine makes it), or null.
  std::shared_ptr<const DerivedValues> derived;

 private:
  struct SymbolicSlot {
    std::size_t index;  // into slots_
    std::int64_t base;  // the value at the base sizes
    SizePolynomial polynomial;
  };

  std::string signature_mismatch(const Signature& signature) const;
  std::string guard(const SymbolicSlot& slot, std::int64_t value) const;

  std::vector<DynamicDim> dims_;
  std::vector<int> symbol_of_;
  Signature signature_;
  std::vector<int> tensor_arguments_;
  std::shared_ptr<const Plan> base_;
  std::vector<IntSlot> slots_;
  std::vector<SymbolicSlot> symbolic_;
  /// Per step: a node of it has a symbolic argument, so its call is bound again for new sizes.
  std::vector<bool> step_arguments_symbolic_;
};

}  // namespace zenith::capture
