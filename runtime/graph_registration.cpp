#include "runtime/graph_registration.h"

namespace zenith {

void GraphUnderLockDeleter::operator()(at::cuda::CUDAGraph* graph) const {
  const auto lock = lock_graph_registration();
  delete graph;
}

LockedGraph make_locked_graph(bool keep_graph) { return LockedGraph(new at::cuda::CUDAGraph(keep_graph)); }

}  // namespace zenith
