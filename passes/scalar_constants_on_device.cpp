#include "passes/scalar_constants_on_device.h"

#include <map>
#include <string>
#include <utility>
#include <variant>

#include <ATen/Context.h>

namespace zenith::passes {

void ScalarConstantsOnDevice::run(ir::Graph& graph, PassReport& report) {
  // CUDA only, where the device backends are; and only with a device to copy to (tests retype CPU
  // captures to CUDA on machines without one, to compile their kernels).
  report.counters["moved"] = 0;
  if (!at::hasCUDA()) return;
  std::int64_t moved = 0;
  std::map<std::pair<int, std::string>, int> copies;  // (CPU constant, device) -> its copy there
  for (std::size_t n = 0; n < graph.nodes.size(); ++n) {
    if (graph.nodes[n].outputs.empty()) continue;
    const auto device = graph.value(graph.nodes[n].outputs.front()).type.device;
    if (!device.is_cuda()) continue;
    for (auto& arg : graph.nodes[n].args) {
      auto* ref = std::get_if<ir::ValueRef>(&arg.value);
      if (ref == nullptr) continue;
      const auto& operand = graph.value(ref->id);
      if (operand.role != ir::ValueRole::Constant || !operand.type.device.is_cpu() || operand.type.rank() != 0) continue;
      const auto data = graph.constants.find(ref->id);
      if (data == graph.constants.end() || !data->second.defined()) continue;
      const auto key = std::make_pair(ref->id, device.str());
      auto copy = copies.find(key);
      if (copy == copies.end()) {
        auto type = operand.type;
        type.device = device;
        const auto tensor = data->second.to(device);
        const int id = graph.add_value(type, ir::ValueRole::Constant);
        graph.constants[id] = tensor;
        copy = copies.emplace(key, id).first;
      }
      ref->id = copy->second;
      ++moved;
    }
  }
  report.counters["moved"] = moved;
}

}  // namespace zenith::passes
