#include "runtime/graph_registration_lock.h"

namespace zenith {

std::unique_lock<std::recursive_mutex> lock_graph_registration() {
  static std::recursive_mutex mutex;
  return std::unique_lock<std::recursive_mutex>(mutex);
}

}  // namespace zenith
