#include "common/random_tensors.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "zenith/error.h"

namespace zenith::tools {
namespace {

// Integers stay in [0, 2): the only range that is a valid index into any non-empty dimension.
constexpr std::int64_t kIntegerHigh = 2;

at::Tensor random_values(std::int64_t count, c10::ScalarType dtype) {
  auto on_cpu = at::TensorOptions().device(at::kCPU);
  if (c10::isComplexType(dtype)) return at::randn({count}, on_cpu.dtype(dtype));
  // randn in double then a cast: every floating dtype gets the same stream of values.
  if (c10::isFloatingType(dtype)) return at::randn({count}, on_cpu.dtype(at::kDouble)).to(dtype);
  auto integers = at::randint(0, kIntegerHigh, {count}, on_cpu.dtype(at::kLong));
  return integers.to(dtype);
}

std::int64_t storage_elements(const ir::TensorType& type) {
  return type.storage_bytes() / static_cast<std::int64_t>(c10::elementSize(type.dtype));
}

}  // namespace

at::Tensor random_tensor(const ir::TensorType& type) {
  auto storage = random_values(storage_elements(type), type.dtype).to(type.device);
  return storage.as_strided(type.sizes, type.strides);
}

void require_device(const c10::Device& device, const std::string& what) {
  if (device.is_cpu()) return;
  if (device.is_cuda()) {
    auto count = at::hasCUDA() ? static_cast<int>(at::getNumGPUs()) : 0;
    if (count == 0) throw Error(fmt::format("{} is on {}, but this machine has no usable CUDA device", what, device.str()));
    if (device.index() >= count) {
      throw Error(fmt::format("{} is on {}, but this machine has only {} CUDA device(s)", what, device.str(), count));
    }
    return;
  }
  throw Error(fmt::format("{} is on {}, which this tool cannot use (cpu and cuda only)", what, device.str()));
}

}  // namespace zenith::tools
