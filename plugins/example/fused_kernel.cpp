#include "fused_kernel.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace zn_example {
namespace {

std::string sizes_text(const int64_t* sizes, size_t ndim) {
  std::string text = "[";
  for (size_t i = 0; i < ndim; ++i) {
    if (i > 0) text += ", ";
    text += std::to_string(sizes[i]);
  }
  return text + "]";
}

// Spelled like the trace format's dtypes so messages can be compared with the group JSON.
std::string dtype_text(DLDataType dtype) {
  std::string text;
  switch (dtype.code) {
    case kDLInt: text = "int"; break;
    case kDLUInt: text = "uint"; break;
    case kDLFloat: text = "float"; break;
    case kDLBfloat: text = "bfloat"; break;
    case kDLComplex: text = "complex"; break;
    default: text = "type code " + std::to_string(dtype.code) + " with bits "; break;
  }
  text += std::to_string(dtype.bits);
  if (dtype.lanes != 1) text += "x" + std::to_string(dtype.lanes);
  return text;
}

bool is_float32(DLDataType dtype) {
  return dtype.code == kDLFloat && dtype.bits == 32 && dtype.lanes == 1;
}

int64_t element_count(const std::vector<int64_t>& sizes) {
  int64_t count = 1;
  for (int64_t size : sizes) count *= size;
  return count;
}

std::string check_tensor(const DLTensor& tensor, const std::string& what,
                         const std::vector<int64_t>& sizes) {
  if (tensor.device.device_type != kDLCPU) {
    return what + " is on DLPack device type " + std::to_string(tensor.device.device_type) +
           ", expected kDLCPU (" + std::to_string(kDLCPU) + ")";
  }
  if (!is_float32(tensor.dtype)) {
    return what + " is " + dtype_text(tensor.dtype) + ", expected float32";
  }
  if (tensor.ndim < 0 || (tensor.ndim > 0 && tensor.shape == nullptr)) {
    return what + " has no valid shape (ndim " + std::to_string(tensor.ndim) + ")";
  }
  const size_t ndim = static_cast<size_t>(tensor.ndim);
  if (ndim != sizes.size() || !std::equal(sizes.begin(), sizes.end(), tensor.shape)) {
    return what + " has sizes " + sizes_text(tensor.shape, ndim) + ", expected " +
           sizes_text(sizes.data(), sizes.size());
  }
  if (tensor.data == nullptr && element_count(sizes) != 0) return what + " has NULL data";
  return "";
}

// `kind` is the singular ("input"), since most messages are about one tensor.
std::string check_list(const Program& program, const DLTensor* tensors, size_t count,
                       size_t expected, const std::string& kind) {
  if (count != expected) {
    return "the group has " + std::to_string(expected) + " " + kind + (expected == 1 ? "" : "s") +
           ", the launch passed " + std::to_string(count);
  }
  if (count > 0 && tensors == nullptr) return kind + "s is NULL";
  for (size_t i = 0; i < count; ++i) {
    std::string problem = check_tensor(tensors[i], kind + " " + std::to_string(i), program.sizes);
    if (!problem.empty()) return problem;
  }
  return "";
}

// The element offset of every tensor at the current N-d index. It advances like an odometer, so a
// step costs one add per tensor except when a dimension wraps; this is what lets one loop serve
// tensors with unrelated strides (transposed, expanded, sliced).
class StridedCursor {
 public:
  StridedCursor(const std::vector<int64_t>& sizes, const std::vector<const DLTensor*>& tensors)
      : sizes_(sizes),
        num_tensors_(tensors.size()),
        strides_(sizes.size() * tensors.size()),
        index_(sizes.size(), 0),
        offsets_(tensors.size(), 0) {
    for (size_t t = 0; t < num_tensors_; ++t) {
      // DLPack allows NULL strides for compact row-major data; Zenith always fills them, but a
      // template should not crash on a producer that does not.
      int64_t compact = 1;
      for (size_t d = sizes_.size(); d-- > 0;) {
        const int64_t* strides = tensors[t]->strides;
        strides_[d * num_tensors_ + t] = strides ? strides[d] : compact;
        compact *= sizes_[d];
      }
    }
  }

  int64_t offset(size_t tensor) const { return offsets_[tensor]; }

  void advance() {
    for (size_t d = sizes_.size(); d-- > 0;) {
      const int64_t* stride = &strides_[d * num_tensors_];
      if (++index_[d] < sizes_[d]) {
        for (size_t t = 0; t < num_tensors_; ++t) offsets_[t] += stride[t];
        return;
      }
      index_[d] = 0;
      for (size_t t = 0; t < num_tensors_; ++t) offsets_[t] -= (sizes_[d] - 1) * stride[t];
    }
  }

 private:
  const std::vector<int64_t>& sizes_;
  size_t num_tensors_;
  std::vector<int64_t> strides_;  // [dim * num_tensors + tensor]: one dimension's strides adjacent
  std::vector<int64_t> index_;
  std::vector<int64_t> offsets_;
};

// Formulas follow ATen's CPU kernels closely enough to match them within float rounding.
inline float apply(OpCode op, float a, float b) {
  switch (op) {
    case OpCode::Relu: return a < 0.0f ? 0.0f : a;  // keeps NaN, as torch.relu does
    case OpCode::Sigmoid: return 1.0f / (1.0f + std::exp(-a));
    case OpCode::Tanh: return std::tanh(a);
    case OpCode::Neg: return -a;
    case OpCode::Exp: return std::exp(a);
    case OpCode::Add: return a + b;
    case OpCode::Sub: return a - b;
    case OpCode::Mul: return a * b;
    case OpCode::Div: return a / b;
  }
  return 0.0f;  // unreachable: the parser only emits the codes above
}

float* data_of(const DLTensor& tensor) {
  return reinterpret_cast<float*>(static_cast<char*>(tensor.data) + tensor.byte_offset);
}

}  // namespace

std::string check_tensors(const Program& program, const DLTensor* inputs, std::size_t num_inputs,
                          const DLTensor* outputs, std::size_t num_outputs) {
  std::string problem = check_list(program, inputs, num_inputs, program.num_inputs, "input");
  if (problem.empty()) {
    problem = check_list(program, outputs, num_outputs, program.output_slots.size(), "output");
  }
  return problem;
}

void run_fused(const Program& program, const DLTensor* inputs, const DLTensor* outputs) {
  const int64_t count = element_count(program.sizes);
  if (count == 0) return;  // zero-size tensors: nothing to read or write, data may be NULL

  const size_t num_inputs = program.num_inputs;
  const size_t num_outputs = program.output_slots.size();
  std::vector<const DLTensor*> tensors;
  std::vector<float*> data;
  for (size_t i = 0; i < num_inputs; ++i) tensors.push_back(&inputs[i]);
  for (size_t i = 0; i < num_outputs; ++i) tensors.push_back(&outputs[i]);
  for (const DLTensor* tensor : tensors) data.push_back(data_of(*tensor));

  StridedCursor cursor(program.sizes, tensors);
  std::vector<float> slots(program.num_slots);
  for (int64_t element = 0; element < count; ++element) {
    for (size_t i = 0; i < num_inputs; ++i) slots[i] = data[i][cursor.offset(i)];
    for (const Instruction& step : program.code) {
      slots[step.dst] = apply(step.op, slots[step.lhs], slots[step.rhs]);
    }
    for (size_t o = 0; o < num_outputs; ++o) {
      data[num_inputs + o][cursor.offset(num_inputs + o)] = slots[program.output_slots[o]];
    }
    cursor.advance();
  }
}

}  // namespace zn_example
