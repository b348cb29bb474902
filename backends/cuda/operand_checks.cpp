#include "backends/cuda/operand_checks.h"

#include <limits>

#include <fmt/format.h>

#include "backends/cuda/expression_rules.h"

namespace zenith::cuda {

void check_group_shape(const ir::Graph& group) {
  if (group.nodes.empty()) throw Unsupported{"the group is empty"};
  if (group.outputs.empty()) {
    throw Unsupported{"the group returns nothing: it only writes its inputs in place (" + group.nodes.front().op +
                      "), which generated kernels do not do"};
  }
  for (int alias : group.output_aliases) {
    if (alias >= 0) throw Unsupported{"an output is written in place into an input"};
  }
  // One kernel runs on one device (a copy to another GPU, x.to("cuda:1"), is no kernel of ours).
  const auto device = group.value(group.outputs.front()).type.device;
  for (const auto& value : group.values) {
    if (value && value->type.device != device) {
      throw Unsupported{fmt::format("value %{} is on {}, the group's outputs on {}", value->id, value->type.device.str(),
                                    device.str())};
    }
  }
}

void check_operand(const ir::Graph& group, int id) {
  const auto& type = group.value(id).type;
  if (storage_type(type.dtype) == nullptr) {
    throw Unsupported{fmt::format("value %{} is {}; generated kernels take float32, float16, bfloat16 and bool", id,
                                  ir::dtype_name(type.dtype))};
  }
  if (!type.device.is_cuda()) throw Unsupported{fmt::format("value %{} is on {}, not CUDA", id, type.device.str())};
}

bool is_contiguous_over(const ir::TensorType& type, const std::vector<std::int64_t>& shape) {
  if (type.sizes != shape) return false;
  std::int64_t expected = 1;
  for (std::size_t d = shape.size(); d-- > 0;) {
    if (shape[d] != 1 && type.strides[d] != expected) return false;
    expected *= shape[d];
  }
  return true;
}

bool needs_64bit_offsets(const ir::Graph& group, const std::vector<int>& operand_ids,
                         const std::vector<std::int64_t>& shape) {
  std::int64_t numel = 1;
  for (auto s : shape) numel *= s;
  if (numel > kMax32BitExtent) return true;
  // Offsets are in elements: the largest one an operand reaches must fit too.
  for (int id : operand_ids) {
    const auto& type = group.value(id).type;
    if (type.storage_bytes() / static_cast<std::int64_t>(c10::elementSize(type.dtype)) > kMax32BitExtent) return true;
  }
  return false;
}

std::int64_t address_word(const DLTensor& t) {
  return static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(static_cast<char*>(t.data) + t.byte_offset));
}

void pack_four_dimensional_operand(const DLTensor& t, std::vector<std::int64_t>& words) {
  words.push_back(address_word(t));
  for (int s = 0; s < 4; ++s) {
    const int d = s - (4 - t.ndim);
    const bool present = d >= 0 && t.shape[d] != 1;
    words.push_back(present ? t.strides[d] : 0);
  }
}

}  // namespace zenith::cuda
