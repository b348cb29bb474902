// CompileOptions::verify_calls: the first calls served by a plan are run eagerly too and compared.
#include "runtime/engine.h"

#include <cmath>

#include <fmt/format.h>

#include "zenith/error.h"

namespace zenith::detail {
namespace {

void flatten(const c10::IValue& value, std::vector<at::Tensor>& out) {
  if (value.isTensor()) out.push_back(value.toTensor());
  else if (value.isTuple()) for (const auto& element : value.toTupleRef().elements()) flatten(element, out);
  else if (value.isTensorList()) for (const auto& tensor : value.toTensorVector()) out.push_back(tensor);
  else if (value.isList()) for (const auto& element : value.toListRef()) flatten(element, out);
}

}  // namespace

void Engine::verify_against_eager(const std::vector<c10::IValue>& args, const c10::IValue& compiled) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (verified_ >= options_.verify_calls) return;
    ++verified_;
  }
  auto eager = run_eager(args);
  std::vector<at::Tensor> got, want;
  flatten(compiled, got);
  flatten(eager, want);
  if (got.size() != want.size()) {
    throw Error::mismatch(options_.name + ": verify: number of outputs", std::to_string(want.size()) + " (eager)",
                          std::to_string(got.size()));
  }
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i].sizes() != want[i].sizes() || got[i].scalar_type() != want[i].scalar_type()) {
      throw Error::mismatch(fmt::format("{}: verify: output {}", options_.name, i),
                            fmt::format("{} {} (eager)", c10::toString(want[i].scalar_type()), c10::str(want[i].sizes())),
                            fmt::format("{} {}", c10::toString(got[i].scalar_type()), c10::str(got[i].sizes())));
    }
    if (got[i].numel() == 0) continue;
    auto a = got[i].to(at::kDouble), b = want[i].to(at::kDouble);
    auto excess = ((a - b).abs() - (options_.verify_atol + options_.verify_rtol * b.abs())).max().item<double>();
    if (excess > 0 || std::isnan(excess)) {
      double worst = (a - b).abs().max().item<double>();
      throw Error(fmt::format("{}: verify: output {} differs from eager by up to {:.3g} (tolerance atol {} + rtol {} * "
                              "|eager|). Report this with the trace dump (ZENITH_DUMP_DIR), or set ZENITH_BACKENDS "
                              "to find the backend at fault.",
                              options_.name, i, worst, options_.verify_atol, options_.verify_rtol));
    }
  }
}

}  // namespace zenith::detail
