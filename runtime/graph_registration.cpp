#include "runtime/graph_registration.h"

namespace zenith {

std::unique_lock<std::recursive_mutex> lock_graph_registration() {
  static std::recursive_mutex mutex;
  return std::unique_lock<std::recursive_mutex>(mutex);
}

void GraphUnderLockDeleter::operator()(at::cuda::CUDAGraph* graph) const {
  const auto lock = lock_graph_registration();
  delete graph;
}

LockedGraph make_locked_graph() { return LockedGraph(new at::cuda::CUDAGraph()); }

}  // namespace zenith
