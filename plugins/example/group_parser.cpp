#include "group_parser.h"

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace zn_example {
namespace {

using nlohmann::json;

constexpr int64_t kSchemaVersion = 1;

[[noreturn]] void malformed(const std::string& message) {
  throw GroupError(Refusal::Malformed, message);
}

[[noreturn]] void unsupported(const std::string& message) {
  throw GroupError(Refusal::Unsupported, message);
}

// What the plugin supports is a short list, so a table is the easiest thing for an author to
// extend. Keys are "op.overload" (or just "op" when the overload is empty).
struct OpSpec {
  const char* name;
  OpCode code;
  bool binary;     // takes "other" besides "self"
  bool has_alpha;  // add/sub carry an "alpha" scale on "other"; only 1 is implemented
};

constexpr OpSpec kOps[] = {
    {"aten::relu", OpCode::Relu, false, false},
    {"aten::sigmoid", OpCode::Sigmoid, false, false},
    {"aten::tanh", OpCode::Tanh, false, false},
    {"aten::neg", OpCode::Neg, false, false},
    {"aten::exp", OpCode::Exp, false, false},
    {"aten::add.Tensor", OpCode::Add, true, true},
    {"aten::sub.Tensor", OpCode::Sub, true, true},
    {"aten::mul.Tensor", OpCode::Mul, true, false},
    {"aten::div.Tensor", OpCode::Div, true, false},
};

const OpSpec* find_op(const std::string& name) {
  for (const OpSpec& spec : kOps) {
    if (name == spec.name) return &spec;
  }
  return nullptr;
}

std::string quoted(const char* key) {
  return std::string("\"") + key + "\"";
}

// Field accessors that turn a schema violation into a message naming the place, instead of the
// generic nlohmann type_error text.
// `where` is a view: callers pass temporaries, which must bind to no reference parameter of a
// function returning a reference (g++ 13's -Wdangling-reference).
const json& field(const json& object, const char* key, std::string_view where) {
  auto it = object.find(key);
  if (it == object.end()) malformed(std::string(where) + " has no " + quoted(key));
  return *it;
}

const json& array_field(const json& object, const char* key, std::string_view where) {
  const json& value = field(object, key, where);
  if (!value.is_array()) malformed(std::string(where) + " " + quoted(key) + " is not an array");
  return value;
}

std::string string_field(const json& object, const char* key, std::string_view where) {
  const json& value = field(object, key, where);
  if (!value.is_string()) malformed(std::string(where) + " " + quoted(key) + " is not a string");
  return value.get<std::string>();
}

int64_t id_of(const json& value, const std::string& what) {
  if (!value.is_number_integer() || value.get<int64_t>() < 0) {
    malformed(what + " is not a non-negative integer id: " + value.dump());
  }
  return value.get<int64_t>();
}

std::string sizes_text(const std::vector<int64_t>& sizes) {
  std::string text = "[";
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (i > 0) text += ", ";
    text += std::to_string(sizes[i]);
  }
  return text + "]";
}

// One pass over the group, in the order the format defines its fields; each step can refuse.
class GroupParser {
 public:
  Program parse(const json& group) {
    if (!group.is_object()) malformed("the group is not a JSON object");
    check_header(group);
    read_values(array_field(group, "values", "the group"));
    read_inputs(array_field(group, "inputs", "the group"));
    const json& nodes = array_field(group, "nodes", "the group");
    for (size_t i = 0; i < nodes.size(); ++i) read_node(nodes[i], i);
    read_outputs(array_field(group, "outputs", "the group"));
    check_aliases(array_field(group, "output_aliases", "the group"));
    return std::move(program_);
  }

 private:
  struct ValueInfo {
    int64_t id;
    std::vector<int64_t> sizes;
  };

  void check_header(const json& group) {
    const json& version = field(group, "schema_version", "the group");
    if (!version.is_number_integer() || version.get<int64_t>() != kSchemaVersion) {
      // Unsupported rather than malformed: a newer host may legitimately speak a newer schema.
      unsupported("schema_version " + version.dump() + " is not supported; this plugin reads " +
                  std::to_string(kSchemaVersion));
    }
    const std::string kind = string_field(group, "kind", "the group");
    if (kind != "group") malformed("kind is \"" + kind + "\", expected \"group\"");
  }

  void read_values(const json& values) {
    for (size_t i = 0; i < values.size(); ++i) {
      const json& value = values[i];
      const std::string where = "values[" + std::to_string(i) + "]";
      if (!value.is_object()) malformed(where + " is not an object");
      ValueInfo info;
      info.id = id_of(field(value, "id", where), where + " id");
      const std::string name = "value " + std::to_string(info.id);
      if (values_.count(info.id) != 0) malformed(name + " is declared twice");

      const std::string dtype = string_field(value, "dtype", name);
      if (dtype != "float32") unsupported(name + " is " + dtype + ", only float32 is supported");
      const std::string device = string_field(value, "device", name);
      if (device != "cpu") unsupported(name + " is on " + device + ", only cpu is supported");

      for (const json& size : array_field(value, "sizes", name)) {
        if (!size.is_number_integer() || size.get<int64_t>() < 0) {
          malformed(name + " has a size that is not a non-negative integer: " + size.dump());
        }
        info.sizes.push_back(size.get<int64_t>());
      }
      // The kernel walks one index space for all tensors, so equal sizes is what makes it correct.
      if (first_value_ && info.sizes != first_value_->sizes) {
        unsupported(name + " has sizes " + sizes_text(info.sizes) + " but value " +
                    std::to_string(first_value_->id) + " has " + sizes_text(first_value_->sizes) +
                    "; this plugin does not broadcast");
      }
      auto inserted = values_.emplace(info.id, std::move(info));
      if (!first_value_) first_value_ = &inserted.first->second;
    }
    if (first_value_) program_.sizes = first_value_->sizes;
  }

  void read_inputs(const json& inputs) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      const int64_t id = declared_id(inputs[i], "inputs[" + std::to_string(i) + "]");
      define(id, "inputs[" + std::to_string(i) + "]");
    }
    program_.num_inputs = program_.num_slots;
  }

  void read_node(const json& node, size_t index) {
    const std::string where = "node " + std::to_string(index);
    if (!node.is_object()) malformed(where + " is not an object");
    std::string op = string_field(node, "op", where);
    if (node.contains("overload")) {
      const std::string overload = string_field(node, "overload", where);
      if (!overload.empty()) op += "." + overload;
    }
    const OpSpec* spec = find_op(op);
    if (!spec) unsupported(op + " is not an elementwise op this plugin knows");

    Instruction instruction{spec->code, 0, 0, 0};
    bool have_self = false;
    bool have_other = false;
    for (const json& arg : array_field(node, "args", where)) {
      if (!arg.is_object()) {
        malformed(where + " (" + op + ") has an argument that is not an object");
      }
      const std::string name = string_field(arg, "name", where + " argument");
      if (name == "self") {
        instruction.lhs = operand_slot(arg, op, name, where);
        have_self = true;
      } else if (name == "other" && spec->binary) {
        instruction.rhs = operand_slot(arg, op, name, where);
        have_other = true;
      } else if (name == "alpha" && spec->has_alpha) {
        check_alpha(arg, op);
      } else {
        unsupported(op + " argument '" + name + "' is not one this plugin understands");
      }
    }
    if (!have_self || (spec->binary && !have_other)) {
      malformed(where + " (" + op + ") lacks a tensor argument");
    }

    const json& outputs = array_field(node, "outputs", where);
    if (outputs.size() != 1) {
      malformed(where + " (" + op + ") has " + std::to_string(outputs.size()) +
                " outputs, expected 1");
    }
    const std::string output_where = where + " (" + op + ") output";
    instruction.dst = define(declared_id(outputs[0], output_where), output_where);
    program_.code.push_back(instruction);
  }

  uint32_t operand_slot(const json& arg, const std::string& op, const std::string& name,
                        const std::string& where) {
    auto it = arg.find("value");
    if (it == arg.end()) unsupported(op + " argument '" + name + "' is not a tensor");
    const int64_t id = declared_id(*it, where + " (" + op + ") argument '" + name + "'");
    auto slot = slots_.find(id);
    if (slot == slots_.end()) {
      // A well-formed group can still do this with a constant that is not passed as an input.
      unsupported(where + " (" + op + ") reads value " + std::to_string(id) +
                  ", which is neither a group input nor made by an earlier node");
    }
    return slot->second;
  }

  // PyTorch keeps int and double scalars apart; both spellings of 1 mean "no scaling".
  static void check_alpha(const json& arg, const std::string& op) {
    auto as_int = arg.find("int");
    if (as_int != arg.end() && as_int->is_number_integer() && as_int->get<int64_t>() == 1) return;
    auto as_double = arg.find("double");
    if (as_double != arg.end() && as_double->is_number() && as_double->get<double>() == 1.0) return;
    const std::string shown = as_int != arg.end()      ? as_int->dump()
                              : as_double != arg.end() ? as_double->dump()
                                                       : arg.dump();
    unsupported(op + " has alpha " + shown + ", only alpha 1 is supported");
  }

  void read_outputs(const json& outputs) {
    for (size_t i = 0; i < outputs.size(); ++i) {
      const std::string where = "outputs[" + std::to_string(i) + "]";
      const int64_t id = declared_id(outputs[i], where);
      auto slot = slots_.find(id);
      if (slot == slots_.end()) {
        malformed(where + " is value " + std::to_string(id) + ", which no node produces");
      }
      program_.output_slots.push_back(slot->second);
    }
  }

  // Outputs that alias inputs are in-place ops; writing them element by element is fine here, but
  // this template keeps to fresh outputs so its kernel never has to reason about overlap.
  void check_aliases(const json& aliases) {
    if (aliases.size() != program_.output_slots.size()) {
      malformed("output_aliases has " + std::to_string(aliases.size()) + " entries for " +
                std::to_string(program_.output_slots.size()) + " outputs");
    }
    for (size_t i = 0; i < aliases.size(); ++i) {
      if (!aliases[i].is_number_integer()) {
        malformed("output_aliases[" + std::to_string(i) + "] is not an integer");
      }
      if (aliases[i].get<int64_t>() != -1) {
        unsupported("output " + std::to_string(i) + " aliases input " + aliases[i].dump() +
                    " (an in-place op); this plugin only writes fresh outputs");
      }
    }
  }

  int64_t declared_id(const json& value, const std::string& what) {
    const int64_t id = id_of(value, what);
    if (values_.count(id) == 0) {
      malformed(what + " is value " + std::to_string(id) + ", which is not in \"values\"");
    }
    return id;
  }

  // Values are single-assignment: each one gets its slot where it is first made.
  uint32_t define(int64_t id, const std::string& where) {
    if (slots_.count(id) != 0) {
      malformed(where + " writes value " + std::to_string(id) + ", which is already defined");
    }
    const uint32_t slot = program_.num_slots++;
    slots_.emplace(id, slot);
    return slot;
  }

  Program program_;
  std::unordered_map<int64_t, ValueInfo> values_;
  const ValueInfo* first_value_ = nullptr;  // stable: unordered_map never moves its elements
  std::unordered_map<int64_t, uint32_t> slots_;
};

}  // namespace

Program parse_group(const char* text, std::size_t size) {
  if (text == nullptr) malformed("group_json is NULL");
  json group;
  try {
    group = json::parse(text, text + size);
  } catch (const json::exception& e) {  // syntax, and numbers too large for a double
    malformed(std::string("group JSON does not parse: ") + e.what());
  }
  try {
    return GroupParser().parse(group);
  } catch (const json::exception& e) {
    // The accessors above check types first; this is only a safety net for a case they missed.
    malformed(std::string("group JSON has an unexpected shape: ") + e.what());
  }
}

}  // namespace zn_example
