#include "inspect/dot_writer.h"

#include <map>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "inspect/dump_file.h"

namespace zenith::inspect {
namespace {

// Pastel fills keep black labels readable; backends beyond the palette reuse it in order.
const std::vector<std::string> kPalette = {"#8dd3c7", "#ffffb3", "#bebada", "#fb8072",
                                           "#80b1d3", "#fdb462", "#b3de69", "#fccde5"};
const char* const kHostColour = "#d9d9d9";
const char* const kUnplacedColour = "#ffffff";

std::string escape(const std::string& text) {
  std::string escaped;
  for (char c : text) {
    if (c == '"' || c == '\\') escaped += '\\';
    escaped += c;
  }
  return escaped;
}

std::string short_type(const ir::TensorType& type) {
  auto text = fmt::format("{}[{}]", ir::dtype_name(type.dtype), fmt::join(type.sizes, ", "));
  return type.device.is_cpu() ? text : text + " " + type.device.str();
}

// Colours in order of first appearance, so the same dump always gets the same picture.
std::map<std::string, std::string> colour_per_backend(const std::vector<std::string>& backends) {
  std::map<std::string, std::string> colours{{"host", kHostColour}, {"-", kUnplacedColour}};
  std::size_t next = 0;
  for (const auto& backend : backends) {
    if (!colours.count(backend)) colours[backend] = kPalette[next++ % kPalette.size()];
  }
  return colours;
}

// Nodes no step lists are drawn as such rather than with a backend name.
std::string shown_backend(const std::string& backend) { return backend == "-" ? "(no step)" : backend; }

// "n3" for the node producing `id`, "v3" for an input or constant.
std::string source_of(int id, const std::vector<int>& producers) {
  int producer = id < static_cast<int>(producers.size()) ? producers[id] : -1;
  return producer >= 0 ? fmt::format("n{}", producer) : fmt::format("v{}", id);
}

void write_sources(const ir::Graph& graph, std::ostream& out) {
  for (const auto& value : graph.values) {
    if (!value || (value->role == ir::ValueRole::Intermediate)) continue;
    auto name = value->name.empty() ? "" : " " + value->name;
    out << fmt::format("  v{} [shape=ellipse, label=\"%{} {}{}\\n{}\"];\n", value->id, value->id,
                       ir::role_name(value->role), escape(name), escape(short_type(value->type)));
  }
}

void write_nodes(const ir::Graph& graph, const std::vector<std::string>& backends,
                 const std::map<std::string, std::string>& colours, std::ostream& out) {
  for (std::size_t i = 0; i < graph.nodes.size(); ++i) {
    out << fmt::format("  n{} [label=\"{}\\n{}\", fillcolor=\"{}\"];\n", i, escape(graph.nodes[i].qualified_name()),
                       escape(shown_backend(backends[i])), colours.at(backends[i]));
  }
}

void write_edge(const std::string& from, const std::string& to, const ir::Graph& graph, int id, std::ostream& out) {
  auto label = graph.has_value(id) ? short_type(graph.value(id).type) : "?";
  out << fmt::format("  {} -> {} [label=\"{}\"];\n", from, to, escape(label));
}

void write_edges(const ir::Graph& graph, std::ostream& out) {
  auto producers = graph.producers();
  for (std::size_t i = 0; i < graph.nodes.size(); ++i) {
    // A value a node reads twice (add(x, x)) gets one edge.
    auto inputs = graph.nodes[i].input_ids();
    for (int id : std::set<int>(inputs.begin(), inputs.end())) {
      write_edge(source_of(id, producers), fmt::format("n{}", i), graph, id, out);
    }
  }
  for (std::size_t o = 0; o < graph.outputs.size(); ++o) {
    out << fmt::format("  out{} [shape=ellipse, label=\"output {}\"];\n", o, o);
    write_edge(source_of(graph.outputs[o], producers), fmt::format("out{}", o), graph, graph.outputs[o], out);
  }
}

void write_legend(const std::map<std::string, std::string>& colours, const std::set<std::string>& used,
                  std::ostream& out) {
  out << "  subgraph cluster_legend {\n    label=\"backends\";\n";
  std::size_t index = 0;
  for (const auto& backend : used) {
    out << fmt::format("    legend{} [label=\"{}\", fillcolor=\"{}\"];\n", index++, escape(shown_backend(backend)),
                       colours.at(backend));
  }
  out << "  }\n";
}

}  // namespace

void write_dot(const Dump& dump, std::ostream& out) {
  const auto& graph = dump.optimized;
  auto backends = backend_per_node(dump);
  auto colours = colour_per_backend(backends);
  out << fmt::format("digraph \"{}\" {{\n", escape(dump.module_name.empty() ? "zenith" : dump.module_name));
  out << "  node [shape=box, style=\"rounded,filled\", fontname=\"monospace\", fillcolor=\"#ffffff\"];\n";
  out << "  edge [fontname=\"monospace\", fontsize=10];\n";
  write_sources(graph, out);
  write_nodes(graph, backends, colours, out);
  write_edges(graph, out);
  write_legend(colours, std::set<std::string>(backends.begin(), backends.end()), out);
  out << "}\n";
}

}  // namespace zenith::inspect
