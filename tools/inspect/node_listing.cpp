#include "inspect/node_listing.h"

#include <fmt/format.h>

#include "core/printer.h"
#include "inspect/dump_file.h"

namespace zenith::inspect {

void write_node_listing(const Dump& dump, bool captured, std::ostream& out) {
  const auto& graph = captured ? dump.captured : dump.optimized;
  out << fmt::format("# {} graph of {}: {} nodes\n", captured ? "captured" : "optimized",
                     dump.module_name.empty() ? "(unnamed)" : dump.module_name, graph.nodes.size());
  // Steps index the optimized graph; the captured one ran on no backend.
  auto backends = captured ? std::vector<std::string>(graph.nodes.size(), "") : backend_per_node(dump);
  for (std::size_t i = 0; i < graph.nodes.size(); ++i) {
    auto text = ir::node_to_text(graph, graph.nodes[i]);
    if (captured) out << fmt::format("{:>5}  {}\n", i, text);
    else out << fmt::format("{:>5}  {:<10} {}\n", i, backends[i], text);
  }
}

}  // namespace zenith::inspect
