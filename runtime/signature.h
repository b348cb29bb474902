// Signature: what must match for a cached plan to serve a call.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <ATen/core/ivalue.h>

#include "core/tensor_type.h"

namespace zenith {

/// One call argument as the signature sees it: a tensor's exact type, or a non-tensor's value.
struct ArgSignature {
  bool is_tensor = false;
  ir::TensorType tensor;
  /// Non-tensor arguments: their printed value (they are baked into the trace).
  std::string scalar;
  bool operator==(const ArgSignature& other) const;
};

/// The signature of a call: arguments, grad mode, training flag, autocast regions, and the
/// parameters' types.
struct Signature {
  std::vector<ArgSignature> args;
  bool grad_mode = false;
  bool training = false;
  /// The autocast regions enabled on the calling thread (autocast_regions()): a trace holds the
  /// casts they made, so a plan holds for the same regions only.
  std::string autocast;
  /// Hash of the parameters' and buffers' dtypes, sizes, strides and devices.
  std::size_t state_fingerprint = 0;
  std::size_t hash = 0;

  bool operator==(const Signature& other) const;
  /// e.g. "(float32[32, 100, 1024] strides [...] cpu, 3) grad=off eval".
  std::string to_string() const;
  /// A readable account of what differs from `other`, e.g. "input 0: sizes [32, 100] -> [32, 200]".
  std::string describe_change(const Signature& previous) const;
};

/// Reads the signature of a call; throws zenith::Error for an argument that is neither a tensor,
/// a bool, an integer nor a double.
Signature make_signature(const std::vector<c10::IValue>& args, const std::vector<at::Tensor>& state, bool training);
/// As above, with the parameters' fingerprint already computed (`state_fingerprint(state)`).
Signature make_signature(const std::vector<c10::IValue>& args, std::size_t state_fingerprint, bool training);

/// Whether make_signature(args, state_fingerprint, training) would equal `signature`, read without
/// building a Signature (two heap vectors per tensor argument and a string for the autocast
/// regions: with the cache's lookup, a tenth of a graphed BERT-base b1 call's host time in an H200
/// profile). False for a call with a non-tensor or undefined argument: the caller builds its
/// signature then.
bool has_signature(const Signature& signature, const std::vector<c10::IValue>& args, std::size_t state_fingerprint,
                   bool training);
/// Whether has_signature can ever match `signature`: every argument a tensor.
bool signature_is_repeatable(const Signature& signature);

/// The autocast regions enabled on this thread, e.g. "cuda:bfloat16" or "cpu:bfloat16,cuda:float16"
/// (empty: none).
std::string autocast_regions();

/// A hash of the dtypes, sizes, strides and devices of a module's parameters and buffers.
std::size_t state_fingerprint(const std::vector<at::Tensor>& state);

/// An argument's type as a signature holds it: `type` with the stride of every dimension of size
/// 1 set as a contiguous tensor's would be (the product of the later sizes). Such a dimension is
/// never stepped over, so its stride places no element (PyTorch's contiguity checks skip it too):
/// types that differ only there describe the same elements at the same offsets, and a kernel
/// indexes both alike (index 0 times any stride).
ir::TensorType without_unit_dim_strides(ir::TensorType type);

struct SignatureHash {
  std::size_t operator()(const Signature& signature) const { return signature.hash; }
};

}  // namespace zenith
