// The engine behind a CompiledModule: signature -> plan cache -> capture, passes, lowering ->
// execution, with eager fallback, verification and dumps.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "capture/plan_cache.h"
#include "capture/signature.h"
#include "core/backend.h"
#include "core/plan.h"
#include "zenith/compile.h"

namespace zenith::detail {

class Engine {
 public:
  Engine(ModuleAccess access, CompileOptions options);

  /// Runs one call.
  c10::IValue call(std::vector<c10::IValue> args);
  CompileReport last_report() const;
  CacheStats stats() const;
  const CompileOptions& options() const { return options_; }

 private:
  /// A compiled signature: a plan, or the reason it runs eagerly.
  struct Entry {
    std::shared_ptr<const Plan> plan;
    std::string eager_reason;
    std::size_t tensor_args = 0;
  };
  struct Compiled {
    std::shared_ptr<const Entry> entry;
    c10::IValue result;  // what the capture's forward returned
  };

  Compiled compile_signature(const std::vector<c10::IValue>& args,
                             const std::vector<std::pair<std::string, at::Tensor>>& state, const Signature& signature);
  c10::IValue run_plan(const Entry& entry, const std::vector<c10::IValue>& args,
                       const std::vector<std::pair<std::string, at::Tensor>>& state);
  c10::IValue run_eager(const std::vector<c10::IValue>& args);
  void verify_against_eager(const std::vector<c10::IValue>& args, const c10::IValue& compiled);
  void check_arguments(const std::vector<c10::IValue>& args) const;

  ModuleAccess access_;
  CompileOptions options_;
  std::vector<const Backend*> backends_;
  mutable std::mutex mutex_;
  PlanCache<Entry> cache_;
  CacheStats stats_;
  CompileReport last_report_;
  std::optional<Signature> last_signature_;
  int verified_ = 0;
  bool told_about_gradients_ = false;
};

}  // namespace zenith::detail
