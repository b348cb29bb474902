#include "passes/node_splicing.h"

#include <iterator>

namespace zenith::passes {

ir::Node make_node(const char* op, const char* overload, std::vector<ir::Argument> args) {
  ir::Node node;
  node.op = op;
  node.overload = overload;
  node.args = std::move(args);
  return node;
}

std::size_t splice_nodes(ir::Graph& graph, std::size_t at, std::vector<ir::Node> made, const std::set<std::size_t>& dropped) {
  std::vector<ir::Node> nodes;
  nodes.reserve(graph.nodes.size() + made.size());
  std::size_t after = 0;
  for (std::size_t n = 0; n < graph.nodes.size(); ++n) {
    if (n == at) {
      std::move(made.begin(), made.end(), std::back_inserter(nodes));
      after = nodes.size();
    }
    if (!dropped.count(n)) nodes.push_back(std::move(graph.nodes[n]));
  }
  graph.nodes = std::move(nodes);
  return after;
}

}  // namespace zenith::passes
