#include "core/graph.h"

#include <fmt/format.h>

#include "zenith/error.h"

namespace zenith::ir {

const char* role_name(ValueRole role) {
  switch (role) {
    case ValueRole::Input: return "input";
    case ValueRole::Parameter: return "parameter";
    case ValueRole::Constant: return "constant";
    case ValueRole::Intermediate: return "intermediate";
  }
  return "intermediate";
}

ValueRole role_from_name(const std::string& name) {
  if (name == "input") return ValueRole::Input;
  if (name == "parameter") return ValueRole::Parameter;
  if (name == "constant") return ValueRole::Constant;
  if (name == "intermediate") return ValueRole::Intermediate;
  throw Error::mismatch("value role", "input, parameter, constant or intermediate", "'" + name + "'");
}

std::string Node::qualified_name() const { return overload.empty() ? op : op + "." + overload; }

std::vector<int> Node::input_ids() const {
  std::vector<int> ids;
  for (const auto& argument : args) {
    for (int id : argument.value_ids()) ids.push_back(id);
  }
  return ids;
}

const Argument* Node::arg(const std::string& name) const {
  for (const auto& argument : args) {
    if (argument.name == name) return &argument;
  }
  return nullptr;
}

int Graph::add_value(TensorType type, ValueRole role, std::string name) {
  int id = static_cast<int>(values.size());
  values.push_back(Value{id, std::move(type), role, std::move(name)});
  return id;
}

bool Graph::has_value(int id) const {
  return id >= 0 && id < static_cast<int>(values.size()) && values[id].has_value();
}

const Value& Graph::value(int id) const {
  if (!has_value(id)) throw Error(fmt::format("IR: no value %{} in the graph", id));
  return *values[id];
}

Value& Graph::value(int id) {
  if (!has_value(id)) throw Error(fmt::format("IR: no value %{} in the graph", id));
  return *values[id];
}

std::size_t Graph::value_count() const {
  std::size_t n = 0;
  for (const auto& v : values) n += v.has_value();
  return n;
}

std::vector<int> Graph::producers() const {
  std::vector<int> producer(values.size(), -1);
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    for (int id : nodes[i].outputs) {
      if (id >= 0 && id < static_cast<int>(producer.size())) producer[id] = static_cast<int>(i);
    }
  }
  return producer;
}

std::vector<std::vector<int>> Graph::consumers() const {
  std::vector<std::vector<int>> readers(values.size());
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    for (int id : nodes[i].input_ids()) {
      if (id >= 0 && id < static_cast<int>(readers.size()) &&
          (readers[id].empty() || readers[id].back() != static_cast<int>(i))) {
        readers[id].push_back(static_cast<int>(i));
      }
    }
  }
  return readers;
}

void Node::rename_inputs(const std::function<int(int)>& rename) {
  for (auto& argument : args) {
    if (auto* ref = std::get_if<ValueRef>(&argument.value)) {
      ref->id = rename(ref->id);
    } else if (auto* list = std::get_if<ValueListRef>(&argument.value)) {
      for (auto& id : list->ids) {
        if (id) id = rename(*id);
      }
    }
  }
}

void Graph::replace_uses(int from, int to) {
  auto rename = [&](int id) { return id == from ? to : id; };
  for (auto& node : nodes) node.rename_inputs(rename);
  for (auto& id : outputs) {
    if (id == from) id = to;
  }
}

void Graph::remove_unused_values() {
  std::vector<bool> used(values.size(), false);
  auto mark = [&](int id) {
    if (id >= 0 && id < static_cast<int>(used.size())) used[id] = true;
  };
  for (int id : inputs) mark(id);
  for (int id : outputs) mark(id);
  for (const auto& node : nodes) {
    for (int id : node.input_ids()) mark(id);
    for (int id : node.outputs) mark(id);
  }
  for (std::size_t id = 0; id < values.size(); ++id) {
    if (!used[id] && values[id]) {
      values[id].reset();
      constants.erase(static_cast<int>(id));
    }
  }
}

}  // namespace zenith::ir
