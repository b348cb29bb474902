#include "conformance/abi_checks.h"

#include <optional>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "common/error_text.h"
#include "common/random_tensors.h"
#include "core/dlpack_view.h"
#include "core/graph_json.h"

namespace zenith::conformance {
namespace {

CaseResult pass() { return {Outcome::Pass, ""}; }
CaseResult fail(const std::string& why) { return {Outcome::Fail, why}; }

// Texts that are not a usable group: empty, cut short, the wrong JSON type, a field of the wrong type.
const std::vector<std::string>& malformed_groups() {
  static const std::vector<std::string> texts = {
      "",
      "{\"schema_version\": 1, \"kind\": \"group\", \"values\": [",
      "[1, 2, 3]",
      "{\"schema_version\": 1, \"kind\": \"group\", \"values\": \"none\", \"inputs\": 7, \"nodes\": {}}",
  };
  return texts;
}

CaseResult check_malformed_query(const Backend& plugin) {
  for (std::size_t i = 0; i < malformed_groups().size(); ++i) {
    if (!plugin.query(malformed_groups()[i])) {
      return fail(fmt::format("claimed malformed group text #{} ({})", i, nlohmann::json(malformed_groups()[i]).dump()));
    }
  }
  return pass();
}

// An op that exists nowhere: every plugin must decline it, and then refuse to compile it.
ir::Graph unknown_op_group(const std::vector<Case>& cases) {
  for (const auto& c : cases) {
    if (c.group.nodes.size() == 1 && c.group.inputs.size() == 1) {
      auto group = c.group;
      group.nodes[0].op = "zenith_conformance::no_such_op";
      return group;
    }
  }
  return {};
}

CaseResult check_declined_compile(const Backend& plugin, const std::vector<Case>& cases) {
  auto text = ir::to_json(unknown_op_group(cases), ir::GraphKind::Group).dump();
  if (!plugin.query(text)) return fail("claimed a group whose op 'zenith_conformance::no_such_op' does not exist");
  try {
    plugin.compile(text);
  } catch (const std::exception&) {
    return pass();
  }
  return fail("compile returned a kernel for a group it had declined");
}

std::optional<Case> first_claimed(const Backend& plugin, const std::vector<Case>& cases) {
  for (const auto& c : cases) {
    if (!plugin.query(ir::to_json(c.group, ir::GraphKind::Group).dump())) return c;
  }
  return std::nullopt;
}

// Launches with one input too many; the kernel must say so rather than read past what it knows.
CaseResult check_wrong_input_count(const Backend& plugin, const std::vector<Case>& cases) {
  auto claimed = first_claimed(plugin, cases);
  if (!claimed) return {Outcome::Skipped, "the plugin claims none of the cases"};
  const auto& group = claimed->group;
  std::vector<at::Tensor> inputs, outputs;
  for (int id : group.inputs) inputs.push_back(tools::random_tensor(group.value(id).type));
  inputs.push_back(inputs.front());
  for (int id : group.outputs) outputs.push_back(tools::random_tensor(group.value(id).type));
  std::vector<DLTensor> input_views, output_views;
  for (const auto& t : inputs) input_views.push_back(borrow_dlpack(t));
  for (const auto& t : outputs) output_views.push_back(borrow_dlpack(t));
  std::shared_ptr<Kernel> kernel;
  try {
    kernel = plugin.compile(ir::to_json(group, ir::GraphKind::Group).dump());
  } catch (const std::exception& e) {
    return fail(fmt::format("claimed '{}' but compile failed: {}", claimed->name, tools::error_text(e)));
  }
  try {
    plugin.launch(*kernel, input_views, output_views, nullptr);
  } catch (const std::exception&) {
    return pass();
  }
  return fail(fmt::format("launch of '{}' with {} inputs instead of {} returned success", claimed->name,
                          inputs.size(), group.inputs.size()));
}

}  // namespace

std::vector<AbiCheck> run_abi_checks(const Backend& plugin, const std::vector<Case>& cases) {
  return {
      {"ABI: query of malformed group JSON declines or returns a status", check_malformed_query(plugin)},
      {"ABI: compile of a declined group returns an error status", check_declined_compile(plugin, cases)},
      {"ABI: launch with a wrong number of inputs returns an error", check_wrong_input_count(plugin, cases)},
  };
}

}  // namespace zenith::conformance
