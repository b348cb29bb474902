// The process-wide lock under which Zenith captures and destroys CUDA graphs
// (runtime/graph_registration.h says why), apart from the graphs themselves so that code built
// without LibTorch's CUDA part can hold it too: parameter packing hands freed memory back to the
// device under it (runtime/parameter_packing.cpp), since a free while another thread captures would
// end that capture.
#pragma once

#include <mutex>

namespace zenith {

/// Held from before a graph registers with the generator to after its capture ends, and while a
/// graph is destroyed. Recursive: a capture that fails drops its graph while holding it.
std::unique_lock<std::recursive_mutex> lock_graph_registration();

}  // namespace zenith
