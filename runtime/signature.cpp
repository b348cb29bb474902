#include "runtime/signature.h"

#include <algorithm>
#include <array>

#include <ATen/autocast_mode.h>
#include <ATen/core/grad_mode.h>
#include <c10/util/hash.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "zenith/error.h"

namespace zenith {
namespace {

// The devices whose autocast regions a signature holds.
constexpr std::array<at::DeviceType, 2> kAutocastDevices = {at::kCPU, at::kCUDA};

std::size_t hash_type(std::size_t seed, const ir::TensorType& type) {
  seed = c10::hash_combine(seed, static_cast<std::size_t>(type.dtype));
  // LibTorch's hash of the device, not of its name: a call hashes every argument (str() built a
  // string each time, 2% of a graphed BERT-base call's host time on the H200).
  seed = c10::hash_combine(seed, std::hash<c10::Device>()(type.device));
  seed = c10::hash_combine(seed, type.requires_grad);
  for (auto size : type.sizes) seed = c10::hash_combine(seed, static_cast<std::size_t>(size));
  for (auto stride : type.strides) seed = c10::hash_combine(seed, static_cast<std::size_t>(stride) * 31);
  return seed;
}

std::string describe_arg(const ArgSignature& arg) { return arg.is_tensor ? arg.tensor.to_string() : arg.scalar; }

// Whether without_unit_dim_strides(type_of(tensor)) == type, without building either.
bool has_type(const at::Tensor& tensor, const ir::TensorType& type) {
  if (!tensor.defined() || tensor.scalar_type() != type.dtype || tensor.device() != type.device ||
      tensor.requires_grad() != type.requires_grad) {
    return false;
  }
  const auto sizes = tensor.sizes();
  const auto strides = tensor.strides();
  if (sizes.size() != type.sizes.size() || strides.size() != type.strides.size()) return false;
  std::int64_t later = 1;  // as without_unit_dim_strides: the product of the sizes after the dimension
  for (std::size_t d = sizes.size(); d-- > 0;) {
    if (sizes[d] != type.sizes[d] || (sizes[d] == 1 ? later : strides[d]) != type.strides[d]) return false;
    later *= std::max<std::int64_t>(sizes[d], 1);
  }
  return true;
}

// Whether autocast_regions() == regions; without building the string when both are empty.
bool has_autocast_regions(const std::string& regions) {
  if (!regions.empty()) return autocast_regions() == regions;
  return std::none_of(kAutocastDevices.begin(), kAutocastDevices.end(),
                      [](at::DeviceType device) { return at::autocast::is_autocast_enabled(device); });
}

}  // namespace

bool ArgSignature::operator==(const ArgSignature& other) const {
  return is_tensor == other.is_tensor && (is_tensor ? tensor == other.tensor : scalar == other.scalar);
}

bool Signature::operator==(const Signature& other) const {
  return hash == other.hash && grad_mode == other.grad_mode && training == other.training &&
         autocast == other.autocast && state_fingerprint == other.state_fingerprint && args == other.args;
}

std::string Signature::to_string() const {
  std::vector<std::string> parts;
  for (const auto& arg : args) parts.push_back(describe_arg(arg));
  return fmt::format("({}) grad={} {}{}", fmt::join(parts, ", "), grad_mode ? "on" : "off", training ? "train" : "eval",
                     autocast.empty() ? "" : " autocast " + autocast);
}

std::string Signature::describe_change(const Signature& previous) const {
  std::vector<std::string> changes;
  if (args.size() != previous.args.size()) {
    changes.push_back(fmt::format("{} arguments instead of {}", args.size(), previous.args.size()));
  }
  for (std::size_t i = 0; i < std::min(args.size(), previous.args.size()); ++i) {
    const auto& now = args[i];
    const auto& before = previous.args[i];
    if (now == before) continue;
    if (now.is_tensor != before.is_tensor) {
      changes.push_back(fmt::format("argument {}: {} -> {}", i, describe_arg(before), describe_arg(now)));
      continue;
    }
    if (!now.is_tensor) {
      changes.push_back(fmt::format("argument {}: {} -> {}", i, before.scalar, now.scalar));
      continue;
    }
    const auto& a = before.tensor;
    const auto& b = now.tensor;
    if (a.dtype != b.dtype) changes.push_back(fmt::format("argument {}: dtype {} -> {}", i, ir::dtype_name(a.dtype), ir::dtype_name(b.dtype)));
    if (a.device != b.device) changes.push_back(fmt::format("argument {}: device {} -> {}", i, a.device.str(), b.device.str()));
    if (a.sizes != b.sizes) changes.push_back(fmt::format("argument {}: sizes [{}] -> [{}]", i, fmt::join(a.sizes, ", "), fmt::join(b.sizes, ", ")));
    else if (a.strides != b.strides) changes.push_back(fmt::format("argument {}: strides [{}] -> [{}]", i, fmt::join(a.strides, ", "), fmt::join(b.strides, ", ")));
    if (a.requires_grad != b.requires_grad) changes.push_back(fmt::format("argument {}: requires_grad {} -> {}", i, a.requires_grad, b.requires_grad));
  }
  if (grad_mode != previous.grad_mode) changes.push_back(fmt::format("grad mode {}", grad_mode ? "on" : "off"));
  if (training != previous.training) changes.push_back(training ? "train mode" : "eval mode");
  if (autocast != previous.autocast) {
    changes.push_back(fmt::format("autocast {} -> {}", previous.autocast.empty() ? "off" : previous.autocast,
                                  autocast.empty() ? "off" : autocast));
  }
  if (state_fingerprint != previous.state_fingerprint) changes.push_back("a parameter or buffer changed dtype, shape or device");
  return changes.empty() ? "nothing" : fmt::format("{}", fmt::join(changes, "; "));
}

std::string autocast_regions() {
  std::string regions;
  for (auto device : kAutocastDevices) {
    if (!at::autocast::is_autocast_enabled(device)) continue;
    regions += fmt::format("{}{}:{}", regions.empty() ? "" : ",", c10::DeviceTypeName(device, /*lower_case=*/true),
                           ir::dtype_name(at::autocast::get_autocast_dtype(device)));
  }
  return regions;
}

std::size_t state_fingerprint(const std::vector<at::Tensor>& state) {
  std::size_t seed = state.size();
  for (const auto& tensor : state) {
    if (tensor.defined()) seed = hash_type(seed, type_of(tensor));
  }
  return seed;
}

bool has_signature(const Signature& signature, const std::vector<c10::IValue>& args, std::size_t state_fingerprint,
                   bool training) {
  if (signature.grad_mode != at::GradMode::is_enabled() || signature.training != training ||
      signature.state_fingerprint != state_fingerprint || signature.args.size() != args.size() ||
      !has_autocast_regions(signature.autocast)) {
    return false;
  }
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (!args[i].isTensor() || !signature.args[i].is_tensor || !has_type(args[i].toTensor(), signature.args[i].tensor)) {
      return false;
    }
  }
  return true;
}

bool signature_is_repeatable(const Signature& signature) {
  return std::all_of(signature.args.begin(), signature.args.end(), [](const ArgSignature& arg) { return arg.is_tensor; });
}

Signature make_signature(const std::vector<c10::IValue>& args, const std::vector<at::Tensor>& state, bool training) {
  return make_signature(args, state_fingerprint(state), training);
}

ir::TensorType without_unit_dim_strides(ir::TensorType type) {
  std::int64_t later = 1;  // the product of the sizes after the dimension
  for (std::size_t d = type.sizes.size(); d-- > 0;) {
    if (type.sizes[d] == 1 && d < type.strides.size()) type.strides[d] = later;
    later *= std::max<std::int64_t>(type.sizes[d], 1);
  }
  return type;
}

Signature make_signature(const std::vector<c10::IValue>& args, std::size_t state_fingerprint, bool training) {
  Signature signature;
  signature.grad_mode = at::GradMode::is_enabled();
  signature.training = training;
  signature.autocast = autocast_regions();
  std::size_t seed = c10::hash_combine(signature.grad_mode, training);
  if (!signature.autocast.empty()) seed = c10::hash_combine(seed, std::hash<std::string>()(signature.autocast));
  for (std::size_t i = 0; i < args.size(); ++i) {
    const auto& arg = args[i];
    ArgSignature entry;
    if (arg.isTensor()) {
      if (!arg.toTensor().defined()) {
        throw Error::mismatch(fmt::format("argument {}", i), "a defined tensor", "an undefined tensor");
      }
      entry.is_tensor = true;
      // A generation loop's token sliced from a longer tensor ([1, 1] with strides [n, 1], n
      // growing) and a [1, 1] tensor of its own are one signature: one plan, one CUDA graph.
      entry.tensor = without_unit_dim_strides(type_of(arg.toTensor()));
      seed = hash_type(seed, entry.tensor);
    } else if (arg.isInt() || arg.isDouble() || arg.isBool()) {
      entry.scalar = fmt::format("{}:{}", arg.tagKind(), arg.isInt() ? std::to_string(arg.toInt())
                                                          : arg.isBool() ? std::string(arg.toBool() ? "true" : "false")
                                                                         : fmt::format("{}", arg.toDouble()));
      seed = c10::hash_combine(seed, std::hash<std::string>()(entry.scalar));
    } else {
      throw Error::mismatch(fmt::format("argument {}", i), "a tensor, bool, int or double", arg.tagKind(),
                            "Pass other data through the module's state or close over it in a callable.");
    }
    signature.args.push_back(std::move(entry));
  }
  signature.state_fingerprint = state_fingerprint;
  signature.hash = c10::hash_combine(seed, state_fingerprint);
  return signature;
}

}  // namespace zenith
