#include "core/graph_json.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <string_view>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "core/verifier.h"
#include "zenith/error.h"

namespace zenith::ir {

using nlohmann::json;

namespace {

// ---- writing ----

json type_fields(const Value& value) {
  return json{{"id", value.id},
              {"dtype", dtype_name(value.type.dtype)},
              {"sizes", value.type.sizes},
              {"strides", value.type.strides},
              {"device", value.type.device.str()},
              {"requires_grad", value.type.requires_grad},
              {"role", role_name(value.role)},
              {"name", value.name}};
}

json constant_data(const at::Tensor& tensor, std::size_t limit) {
  auto contiguous = tensor.detach().to(at::kCPU).contiguous();
  std::size_t bytes = contiguous.nbytes();
  if (bytes > limit) return nullptr;
  const auto* data = static_cast<const std::uint8_t*>(contiguous.data_ptr());
  return json(std::vector<std::uint8_t>(data, data + bytes));
}

// JSON has no number for infinities and NaN (nlohmann writes them as null, which reads back as
// no number at all): those are the strings "inf", "-inf" and "nan" (masked_fill(mask, -inf)).
json double_to_json(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}


struct ArgWriter {
  json& out;
  void operator()(const NoneArg&) const { out["none"] = true; }
  void operator()(bool v) const { out["bool"] = v; }
  void operator()(std::int64_t v) const { out["int"] = v; }
  void operator()(double v) const { out["double"] = double_to_json(v); }
  void operator()(const std::string& v) const { out["string"] = v; }
  void operator()(const std::vector<std::int64_t>& v) const { out["ints"] = v; }
  void operator()(const std::vector<double>& v) const {
    json list = json::array();
    for (double d : v) list.push_back(double_to_json(d));
    out["doubles"] = list;
  }
  void operator()(const std::vector<bool>& v) const { out["bools"] = v; }
  void operator()(const c10::Device& v) const { out["device"] = v.str(); }
  void operator()(const ValueRef& v) const { out["value"] = v.id; }
  void operator()(const ValueListRef& v) const {
    json ids = json::array();
    for (const auto& id : v.ids) ids.push_back(id ? json(*id) : json(nullptr));
    out["values"] = ids;
  }
};

json structure_to_json(const OutputStructure& structure) {
  switch (structure.kind) {
    case OutputStructure::Kind::Tensor: return json{{"tensor", structure.index}};
    case OutputStructure::Kind::Constant: {
      json value = json::object();
      std::visit(ArgWriter{value}, structure.constant);
      return json{{"constant", value}};
    }
    case OutputStructure::Kind::Dict: {
      json items = json::array();
      for (std::size_t i = 0; i < structure.elements.size(); ++i) {
        items.push_back(json{{"key", structure.keys.at(i)}, {"value", structure_to_json(structure.elements[i])}});
      }
      return json{{"dict", items}};
    }
    case OutputStructure::Kind::Tuple:
    case OutputStructure::Kind::List: break;
  }
  json elements = json::array();
  for (const auto& element : structure.elements) elements.push_back(structure_to_json(element));
  return json{{structure.kind == OutputStructure::Kind::Tuple ? "tuple" : "list", elements}};
}

// ---- reading ----

[[noreturn]] void fail(const std::string& path, const std::string& message) {
  throw Error(fmt::format("IR JSON at {}: {}", path.empty() ? "/" : path, message));
}

// The key and path are views: the caller's temporaries (a literal key, `path + "/args"`) then bind
// to no reference parameter of a function that returns one (g++ 13's -Wdangling-reference).
const json& field(const json& object, std::string_view key, std::string_view path) {
  if (!object.is_object()) fail(std::string(path), "expected an object");
  auto it = object.find(key);
  if (it == object.end()) fail(std::string(path), fmt::format("missing '{}'", key));
  return *it;
}

template <typename T>
T get(const json& object, const std::string& key, const std::string& path) {
  const auto& value = field(object, key, path);
  try {
    return value.get<T>();
  } catch (const json::exception& e) {
    fail(path + "/" + key, fmt::format("wrong type ({}): {}", value.type_name(), e.what()));
  }
}

// An optional field: `fallback` when absent, else its value, which must have T's type (a field of
// another type is an error, not the fallback: found by fuzzing, it threw nlohmann's type_error).
template <typename T>
T optional_field(const json& object, const std::string& key, T fallback, const std::string& path) {
  if (!object.is_object() || !object.contains(key)) return fallback;
  return get<T>(object, key, path);
}

double double_from_json(const json& j, const std::string& path) {
  if (j.is_number()) return j.get<double>();
  if (j.is_string()) {
    const auto& text = j.get_ref<const std::string&>();
    if (text == "nan") return std::numeric_limits<double>::quiet_NaN();
    if (text == "inf") return std::numeric_limits<double>::infinity();
    if (text == "-inf") return -std::numeric_limits<double>::infinity();
  }
  fail(path, fmt::format("expected a number or \"inf\", \"-inf\", \"nan\", got {}", j.dump()));
}

ArgValue read_arg_value(const json& arg, const std::string& path) {
  if (arg.contains("value")) return ValueRef{get<int>(arg, "value", path)};
  if (arg.contains("values")) {
    ValueListRef list;
    const auto& ids = field(arg, "values", path);
    if (!ids.is_array()) fail(path + "/values", "expected an array");
    for (std::size_t i = 0; i < ids.size(); ++i) {
      if (ids[i].is_null()) list.ids.emplace_back(std::nullopt);
      else if (ids[i].is_number_integer()) list.ids.emplace_back(ids[i].get<int>());
      else fail(fmt::format("{}/values/{}", path, i), "expected a value id or null");
    }
    return list;
  }
  if (arg.contains("none")) return NoneArg{};
  if (arg.contains("bool")) return get<bool>(arg, "bool", path);
  if (arg.contains("int")) return get<std::int64_t>(arg, "int", path);
  if (arg.contains("double")) return double_from_json(field(arg, "double", path), path + "/double");
  if (arg.contains("string")) return get<std::string>(arg, "string", path);
  if (arg.contains("ints")) return get<std::vector<std::int64_t>>(arg, "ints", path);
  if (arg.contains("doubles")) {
    const auto& list = field(arg, "doubles", path);
    if (!list.is_array()) fail(path + "/doubles", "expected an array");
    std::vector<double> values;
    for (std::size_t i = 0; i < list.size(); ++i) values.push_back(double_from_json(list[i], fmt::format("{}/doubles/{}", path, i)));
    return values;
  }
  if (arg.contains("bools")) return get<std::vector<bool>>(arg, "bools", path);
  if (arg.contains("device")) {
    auto text = get<std::string>(arg, "device", path);
    try {
      return c10::Device(text);
    } catch (const std::exception&) {
      fail(path + "/device", "'" + text + "' is not a device (cpu, cuda:0, ...)");
    }
  }
  fail(path, "an argument needs one of value, values, none, bool, int, double, string, ints, doubles, bools, device");
}

OutputStructure read_structure(const json& j, const std::string& path) {
  OutputStructure structure;
  if (j.contains("tensor")) {
    structure.index = get<int>(j, "tensor", path);
    return structure;
  }
  if (j.contains("constant")) {
    structure.kind = OutputStructure::Kind::Constant;
    structure.constant = read_arg_value(field(j, "constant", path), path + "/constant");
    if (std::holds_alternative<ValueRef>(structure.constant) || std::holds_alternative<ValueListRef>(structure.constant)) {
      fail(path + "/constant", "a constant output cannot name values; use 'tensor' for a graph output");
    }
    return structure;
  }
  if (j.contains("dict")) {
    structure.kind = OutputStructure::Kind::Dict;
    const auto& items = field(j, "dict", path);
    if (!items.is_array()) fail(path + "/dict", "expected an array of {\"key\": ..., \"value\": ...}");
    for (std::size_t i = 0; i < items.size(); ++i) {
      auto item_path = fmt::format("{}/dict/{}", path, i);
      structure.keys.push_back(get<std::string>(items[i], "key", item_path));
      structure.elements.push_back(read_structure(field(items[i], "value", item_path), item_path + "/value"));
    }
    return structure;
  }
  bool tuple = j.contains("tuple");
  if (!tuple && !j.contains("list")) fail(path, "expected 'tensor', 'tuple', 'list', 'dict' or 'constant'");
  structure.kind = tuple ? OutputStructure::Kind::Tuple : OutputStructure::Kind::List;
  const auto& elements = field(j, tuple ? "tuple" : "list", path);
  if (!elements.is_array()) fail(path, "expected an array of elements");
  for (std::size_t i = 0; i < elements.size(); ++i) {
    structure.elements.push_back(read_structure(elements[i], fmt::format("{}/{}/{}", path, tuple ? "tuple" : "list", i)));
  }
  return structure;
}

at::Tensor read_constant(const json& data, const TensorType& type, const std::string& path) {
  if (!data.is_array()) fail(path, "expected an array of bytes");
  auto contiguous = at::empty(type.sizes, at::TensorOptions().dtype(type.dtype));
  if (data.size() != contiguous.nbytes()) {
    fail(path, fmt::format("holds {} bytes but {} needs {}", data.size(), type.to_string(), contiguous.nbytes()));
  }
  auto* bytes = static_cast<std::uint8_t*>(contiguous.data_ptr());
  for (std::size_t i = 0; i < data.size(); ++i) {
    if (!data[i].is_number_unsigned() || data[i].get<unsigned>() > 255) fail(fmt::format("{}/{}", path, i), "expected a byte");
    bytes[i] = static_cast<std::uint8_t>(data[i].get<unsigned>());
  }
  auto tensor = at::empty_strided(type.sizes, type.strides, at::TensorOptions().dtype(type.dtype).device(type.device));
  tensor.copy_(contiguous);
  return tensor;
}

void read_value(Graph& graph, const json& j, const std::string& path) {
  Value value;
  value.id = get<int>(j, "id", path);
  if (value.id < 0 || value.id > 10'000'000) fail(path + "/id", "expected an id from 0 to 10000000");
  value.type.dtype = [&] {
    try {
      return dtype_from_name(get<std::string>(j, "dtype", path));
    } catch (const Error& e) {
      fail(path + "/dtype", e.what());
    }
  }();
  value.type.sizes = get<std::vector<std::int64_t>>(j, "sizes", path);
  value.type.strides = get<std::vector<std::int64_t>>(j, "strides", path);
  auto device = get<std::string>(j, "device", path);
  try {
    value.type.device = c10::Device(device);
  } catch (const std::exception&) {
    fail(path + "/device", "'" + device + "' is not a device");
  }
  value.type.requires_grad = optional_field(j, "requires_grad", false, path);
  try {
    value.role = role_from_name(get<std::string>(j, "role", path));
  } catch (const Error& e) {
    fail(path + "/role", e.what());
  }
  value.name = optional_field<std::string>(j, "name", "", path);
  if (static_cast<std::size_t>(value.id) >= graph.values.size()) graph.values.resize(value.id + 1);
  if (graph.values[value.id]) fail(path + "/id", fmt::format("value %{} is listed twice", value.id));
  if (value.role == ValueRole::Constant && j.contains("data") && !j["data"].is_null()) {
    graph.constants[value.id] = read_constant(j["data"], value.type, path + "/data");
  }
  graph.values[value.id] = std::move(value);
}

Node read_node(const json& j, const std::string& path) {
  Node node;
  node.op = get<std::string>(j, "op", path);
  node.overload = optional_field<std::string>(j, "overload", "", path);
  const auto& args = field(j, "args", path);
  if (!args.is_array()) fail(path + "/args", "expected an array");
  for (std::size_t i = 0; i < args.size(); ++i) {
    auto arg_path = fmt::format("{}/args/{}", path, i);
    node.args.push_back(Argument{get<std::string>(args[i], "name", arg_path), read_arg_value(args[i], arg_path)});
  }
  node.outputs = get<std::vector<int>>(j, "outputs", path);
  node.list_output = optional_field(j, "list_output", false, path);
  node.fusion_group = optional_field(j, "fusion_group", -1, path);
  return node;
}

}  // namespace

json to_json(const Graph& graph, GraphKind kind, std::size_t constant_limit) {
  json values = json::array();
  for (const auto& value : graph.values) {
    if (!value) continue;
    auto entry = type_fields(*value);
    if (value->role == ValueRole::Constant) {
      auto it = graph.constants.find(value->id);
      entry["data"] = it == graph.constants.end() ? json(nullptr) : constant_data(it->second, constant_limit);
      if (entry["data"].is_null() && it != graph.constants.end()) entry["elided_bytes"] = it->second.nbytes();
    }
    values.push_back(std::move(entry));
  }
  json nodes = json::array();
  for (const auto& node : graph.nodes) {
    json args = json::array();
    for (const auto& argument : node.args) {
      json arg{{"name", argument.name}};
      std::visit(ArgWriter{arg}, argument.value);
      args.push_back(std::move(arg));
    }
    json entry{{"op", node.op}, {"overload", node.overload}, {"args", args}, {"outputs", node.outputs}};
    if (node.list_output) entry["list_output"] = true;
    if (node.fusion_group >= 0) entry["fusion_group"] = node.fusion_group;
    nodes.push_back(std::move(entry));
  }
  json out{{"schema_version", kSchemaVersion},
           {"kind", kind == GraphKind::Graph ? "graph" : "group"},
           {"values", values},
           {"inputs", graph.inputs},
           {"outputs", graph.outputs},
           {"output_structure", structure_to_json(graph.output_structure)},
           {"nodes", nodes}};
  if (kind == GraphKind::Group) {
    out["output_aliases"] = graph.output_aliases.empty() ? std::vector<int>(graph.outputs.size(), -1) : graph.output_aliases;
  }
  return out;
}

Graph from_json(const json& j, bool allow_missing_constant_data) {
  int version = get<int>(j, "schema_version", "");
  if (version != kSchemaVersion) {
    throw Error::mismatch("IR JSON schema_version", std::to_string(kSchemaVersion), std::to_string(version),
                          "Write the dump with this Zenith version or convert it.");
  }
  Graph graph;
  const auto& values = field(j, "values", "");
  if (!values.is_array()) fail("/values", "expected an array");
  for (std::size_t i = 0; i < values.size(); ++i) read_value(graph, values[i], fmt::format("/values/{}", i));
  const auto& nodes = field(j, "nodes", "");
  if (!nodes.is_array()) fail("/nodes", "expected an array");
  for (std::size_t i = 0; i < nodes.size(); ++i) graph.nodes.push_back(read_node(nodes[i], fmt::format("/nodes/{}", i)));
  graph.inputs = get<std::vector<int>>(j, "inputs", "");
  graph.outputs = get<std::vector<int>>(j, "outputs", "");
  if (j.contains("output_structure")) {
    graph.output_structure = read_structure(j["output_structure"], "/output_structure");
  } else if (graph.outputs.size() == 1) {
    graph.output_structure = OutputStructure{};
  } else {
    graph.output_structure.kind = OutputStructure::Kind::Tuple;
    for (std::size_t i = 0; i < graph.outputs.size(); ++i) {
      graph.output_structure.elements.emplace_back().index = static_cast<int>(i);  // Kind::Tensor
    }
  }
  if (j.contains("output_aliases")) graph.output_aliases = get<std::vector<int>>(j, "output_aliases", "");
  verify(graph, allow_missing_constant_data);
  return graph;
}

json parse_json(const std::string& text, const std::string& what) {
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    throw Error(fmt::format("{} is not valid JSON (byte {}): {}. Check that the file is complete.", what, e.byte, e.what()));
  } catch (const json::exception& e) {
    // Valid syntax the parser still refuses: a number too large for a double (found by fuzzing).
    throw Error(fmt::format("{} holds JSON Zenith cannot read: {}", what, e.what()));
  }
}

}  // namespace zenith::ir
