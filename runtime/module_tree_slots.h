// Where a torch::nn module keeps its parameters, buffers and submodules, so that a call can check
// in microseconds that none was replaced or added, instead of reading them all by name again
// (named_parameters builds every qualified name: about 60 us for ResNet-50's 320 tensors).
#pragma once

#include <memory>
#include <vector>

#include <torch/nn/module.h>

namespace zenith::detail {

/// What a torch::nn module tree held when recorded: each module, the identity of each tensor it
/// registered and each child, in the order of a depth-first walk. Identities are addresses: the
/// engine records when it reads the state and keeps the tensors it read, so a replacement cannot
/// take a recorded tensor's address while the record stands. Not thread-safe: the engine calls it
/// under its lock.
class ModuleTreeSlots {
 public:
  explicit ModuleTreeSlots(std::shared_ptr<torch::nn::Module> module) : module_(std::move(module)) {}

  /// Records the tree as it is now.
  void record();
  /// Whether every module still holds the tensors and children it held when recorded (none
  /// replaced, registered or removed). False before record().
  bool unchanged() const;

 private:
  // Appends (or, when `recorded` is given, compares against it from `at`) the module's identity,
  // its tensors' and children's identities with their counts, then its children's in turn.
  static bool walk(const torch::nn::Module& module, std::vector<const void*>& out, const std::vector<const void*>* recorded,
                   std::size_t& at);

  std::shared_ptr<torch::nn::Module> module_;
  std::vector<const void*> identities_;
  bool recorded_ = false;
};

}  // namespace zenith::detail
