// The tensors a plan binds for one call.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

namespace zenith::detail {

/// The call's tensor arguments in order, then the module's parameters and buffers.
inline std::vector<at::Tensor> call_tensors(const std::vector<c10::IValue>& args,
                                            const std::vector<std::pair<std::string, at::Tensor>>& state) {
  std::vector<at::Tensor> inputs;
  inputs.reserve(args.size() + state.size());
  for (const auto& arg : args) {
    if (arg.isTensor()) inputs.push_back(arg.toTensor());
  }
  for (const auto& item : state) inputs.push_back(item.second);
  return inputs;
}

}  // namespace zenith::detail
