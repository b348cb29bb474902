#include "modes.h"

#include <memory>

#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/script.h>

namespace zenith::bench {

Tensors as_tensors(const c10::IValue& value) {
  if (value.isTensor()) return {value.toTensor()};
  TORCH_CHECK(value.isTuple() || value.isList(), "expected a tensor or a tuple of tensors, got ", value.tagKind());
  Tensors out;
  const auto elements = value.isTuple() ? value.toTupleRef().elements().vec() : value.toListRef().vec();
  for (const auto& e : elements) out.push_back(e.toTensor());
  return out;
}

Call torchscript_call(const std::string& path, const torch::Device& device) {
  auto module = torch::jit::load(path, device);
  module.eval();
  // freeze inlines parameters as constants so that optimize_for_inference can fold them (conv and
  // batch norm, linear and its bias); it is what the TorchScript deployment recipe asks for.
  auto frozen = torch::jit::freeze(module);
  auto optimized = std::make_shared<torch::jit::Module>(torch::jit::optimize_for_inference(frozen));
  return [optimized](const Tensors& in) {
    return as_tensors(optimized->forward(std::vector<c10::IValue>(in.begin(), in.end())));
  };
}

Call aoti_call(const std::string& path, const torch::Device& device) {
  const c10::DeviceIndex index = device.is_cuda() ? (device.has_index() ? device.index() : 0) : -1;
  auto loader = std::make_shared<torch::inductor::AOTIModelPackageLoader>(path, "model", /*run_single_threaded=*/false,
                                                                          /*num_runners=*/1, index);
  return [loader](const Tensors& in) { return loader->run(in); };
}

zenith::CompileOptions zenith_options(const std::string& name) {
  zenith::CompileOptions options;
  options.name = name;
  options.fallback_to_eager = false;
  return options;
}

}  // namespace zenith::bench
