// Fuzzes the IR's JSON reader (core/graph_json.cpp): the graphs of trace dumps and the group JSON
// the JIT CUDA plugin parses. Any input gives a graph or throws zenith::Error; any other exception,
// a crash or an AddressSanitizer report is a bug. A graph read must write back to JSON that reads
// again to the same graph.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/graph_json.h"
#include "zenith/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  nlohmann::json json;
  try {
    json = zenith::ir::parse_json(std::string(reinterpret_cast<const char*>(data), size), "fuzz input");
  } catch (const zenith::Error&) {
    return 0;
  }
  for (bool allow_missing_constant_data : {false, true}) {
    zenith::ir::Graph graph;
    try {
      graph = zenith::ir::from_json(json, allow_missing_constant_data);
    } catch (const zenith::Error&) {
      continue;
    }
    for (auto kind : {zenith::ir::GraphKind::Graph, zenith::ir::GraphKind::Group}) {
      auto written = zenith::ir::to_json(graph, kind);
      auto again = zenith::ir::to_json(zenith::ir::from_json(written, allow_missing_constant_data), kind);
      if (again != written) std::abort();  // a graph that does not survive its own JSON
    }
  }
  return 0;
}
