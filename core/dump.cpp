#include "core/dump.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "core/graph_json.h"
#include "zenith/error.h"

namespace zenith {

using nlohmann::json;

json report_to_json(const CompileReport& report) {
  json passes = json::array();
  for (const auto& pass : report.passes) {
    passes.push_back(json{{"name", pass.name},
                          {"nodes_before", pass.nodes_before},
                          {"nodes_after", pass.nodes_after},
                          {"milliseconds", pass.milliseconds},
                          {"counters", pass.counters}});
  }
  return json{{"signature", report.signature},
              {"nodes_captured", report.nodes_captured},
              {"nodes_final", report.nodes_final},
              {"passes", passes},
              {"groups", report.groups},
              {"host_nodes", report.host_nodes},
              {"graph_breaks", report.graph_breaks},
              {"value_checks", report.value_checks},
              {"nodes_per_backend", report.nodes_per_backend},
              {"kernels_compiled", report.kernels_compiled},
              {"kernel_cache_hits", report.kernel_cache_hits},
              {"groups_without_compile", report.groups_without_compile},
              {"capture_ms", report.capture_ms},
              {"passes_ms", report.passes_ms},
              {"backend_ms", report.backend_ms},
              {"total_ms", report.total_ms},
              {"plan_cache", json{{"hits", report.plan_cache.hits},
                                  {"misses", report.plan_cache.misses},
                                  {"recaptures", report.plan_cache.recaptures},
                                  {"evictions", report.plan_cache.evictions},
                                  {"eager_calls", report.plan_cache.eager_calls},
                                  {"training_calls", report.plan_cache.training_calls},
                                  {"symbolic_plans", report.plan_cache.symbolic_plans},
                                  {"instantiations", report.plan_cache.instantiations},
                                  {"instantiation_ms", report.plan_cache.instantiation_ms},
                                  {"kernels_compiled", report.plan_cache.kernels_compiled},
                                  {"size", report.plan_cache.size},
                                  {"capacity", report.plan_cache.capacity}}},
              {"symbolic", report.symbolic},
              {"static_reason", report.static_reason},
              {"probe_ms", report.probe_ms},
              {"eager_fallback", report.eager_fallback},
              {"fallback_reason", report.fallback_reason},
              {"backward", json{{"compiled", report.backward.compiled},
                                {"nodes", report.backward.nodes},
                                {"groups", report.backward.groups},
                                {"saved_values", report.backward.saved_values},
                                {"recomputed_values", report.backward.recomputed_values},
                                {"ms", report.backward.ms}}}};
}

CompileReport report_from_json(const json& j) {
  try {
    CompileReport report;
    report.signature = j.value("signature", "");
    report.nodes_captured = j.value("nodes_captured", 0);
    report.nodes_final = j.value("nodes_final", 0);
    for (const auto& pass : j.value("passes", json::array())) {
      report.passes.push_back(PassReport{pass.at("name").get<std::string>(), pass.value("nodes_before", 0),
                                         pass.value("nodes_after", 0), pass.value("milliseconds", 0.0),
                                         pass.value("counters", std::map<std::string, std::int64_t>{})});
    }
    report.groups = j.value("groups", 0);
    report.host_nodes = j.value("host_nodes", 0);
    report.graph_breaks = j.value("graph_breaks", std::vector<std::string>{});
    report.value_checks = j.value("value_checks", std::vector<std::string>{});
    report.nodes_per_backend = j.value("nodes_per_backend", std::map<std::string, std::int64_t>{});
    report.kernels_compiled = j.value("kernels_compiled", 0);
    report.kernel_cache_hits = j.value("kernel_cache_hits", 0);
    report.groups_without_compile = j.value("groups_without_compile", 0);
    const auto cache = j.value("plan_cache", json::object());
    report.plan_cache.hits = cache.value("hits", 0);
    report.plan_cache.misses = cache.value("misses", 0);
    report.plan_cache.recaptures = cache.value("recaptures", 0);
    report.plan_cache.evictions = cache.value("evictions", 0);
    report.plan_cache.eager_calls = cache.value("eager_calls", 0);
    report.plan_cache.training_calls = cache.value("training_calls", 0);
    report.plan_cache.symbolic_plans = cache.value("symbolic_plans", 0);
    report.plan_cache.instantiations = cache.value("instantiations", 0);
    report.plan_cache.instantiation_ms = cache.value("instantiation_ms", 0.0);
    report.plan_cache.kernels_compiled = cache.value("kernels_compiled", 0);
    report.plan_cache.size = cache.value("size", std::size_t{0});
    report.plan_cache.capacity = cache.value("capacity", std::size_t{0});
    report.capture_ms = j.value("capture_ms", 0.0);
    report.passes_ms = j.value("passes_ms", 0.0);
    report.backend_ms = j.value("backend_ms", 0.0);
    report.total_ms = j.value("total_ms", 0.0);
    report.symbolic = j.value("symbolic", "");
    report.static_reason = j.value("static_reason", "");
    const auto backward = j.value("backward", json::object());
    report.backward.compiled = backward.value("compiled", false);
    report.backward.nodes = backward.value("nodes", 0);
    report.backward.groups = backward.value("groups", 0);
    report.backward.saved_values = backward.value("saved_values", 0);
    report.backward.recomputed_values = backward.value("recomputed_values", 0);
    report.backward.ms = backward.value("ms", 0.0);
    report.probe_ms = j.value("probe_ms", 0.0);
    report.eager_fallback = j.value("eager_fallback", false);
    report.fallback_reason = j.value("fallback_reason", "");
    return report;
  } catch (const json::exception& e) {
    throw Error(fmt::format("dump at /report: {}", e.what()));
  }
}

namespace {

json steps_to_json(const std::vector<DumpStep>& steps) {
  json out = json::array();
  for (const auto& step : steps) {
    json entry{{"backend", step.backend}, {"nodes", step.nodes}};
    if (!step.declined.empty()) entry["declined"] = step.declined;
    out.push_back(std::move(entry));
  }
  return out;
}

std::vector<DumpStep> steps_from_json(const json& j, const char* key) {
  if (!j.contains(key) || !j[key].is_array()) throw Error(fmt::format("dump at /{}: missing or not an array", key));
  std::vector<DumpStep> steps;
  for (std::size_t i = 0; i < j[key].size(); ++i) {
    const auto& step = j[key][i];
    try {
      DumpStep read{step.at("backend").get<std::string>(), step.at("nodes").get<std::vector<int>>(), {}};
      // Optional: dumps written before it existed have no "declined".
      if (step.contains("declined")) read.declined = step.at("declined").get<std::vector<std::string>>();
      steps.push_back(std::move(read));
    } catch (const json::exception& e) {
      throw Error(fmt::format("dump at /{}/{}: {}", key, i, e.what()));
    }
  }
  return steps;
}

}  // namespace

json dump_to_json(const Dump& dump, std::size_t constant_limit) {
  json out{{"schema_version", ir::kSchemaVersion},
              {"kind", "dump"},
              {"module", dump.module_name},
              {"signature", dump.signature},
              {"captured", ir::to_json(dump.captured, ir::GraphKind::Graph, constant_limit)},
              {"optimized", ir::to_json(dump.optimized, ir::GraphKind::Graph, constant_limit)},
              {"steps", steps_to_json(dump.steps)},
              {"report", report_to_json(dump.report)}};
  if (!dump.backward.nodes.empty() || !dump.backward.outputs.empty()) {
    out["backward"] = ir::to_json(dump.backward, ir::GraphKind::Graph, constant_limit);
    out["backward_steps"] = steps_to_json(dump.backward_steps);
  }
  return out;
}

namespace {

// Reads an optional top-level field, naming it when it has the wrong type.
template <typename T>
T top_level(const json& j, const char* key, T fallback) {
  if (!j.contains(key)) return fallback;
  try {
    return j[key].get<T>();
  } catch (const json::exception&) {
    throw Error(fmt::format("dump at /{}: wrong type ({})", key, j[key].type_name()));
  }
}

}  // namespace

Dump dump_from_json(const json& j) {
  if (!j.is_object()) throw Error("dump at /: expected an object");
  if (top_level<std::string>(j, "kind", "") != "dump") {
    throw Error::mismatch("dump at /kind", "\"dump\"", j.contains("kind") ? j["kind"].dump() : "nothing",
                          "Is this a Zenith trace dump?");
  }
  int version = top_level<int>(j, "schema_version", -1);
  if (version != ir::kSchemaVersion) {
    throw Error::mismatch("dump at /schema_version", std::to_string(ir::kSchemaVersion), std::to_string(version));
  }
  Dump dump;
  dump.module_name = top_level<std::string>(j, "module", "");
  dump.signature = top_level<std::string>(j, "signature", "");
  auto graph_at = [&](const char* key) {
    if (!j.contains(key)) throw Error(fmt::format("dump at /{}: missing", key));
    try {
      return ir::from_json(j[key], /*allow_missing_constant_data=*/true);
    } catch (const Error& e) {
      throw Error(fmt::format("dump at /{}: {}", key, e.what()));
    }
  };
  dump.captured = graph_at("captured");
  dump.optimized = graph_at("optimized");
  dump.steps = steps_from_json(j, "steps");
  if (j.contains("backward")) {
    dump.backward = graph_at("backward");
    dump.backward_steps = steps_from_json(j, "backward_steps");
  }
  if (j.contains("report")) dump.report = report_from_json(j["report"]);
  return dump;
}

void write_json_file(const std::string& path, const json& content) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  auto temporary = fmt::format("{}.tmp.{}", path, ::getpid());
  {
    std::ofstream out(temporary);
    if (!out) throw Error(fmt::format("cannot write {}: check that the folder is writable", temporary));
    out << content.dump(1) << "\n";
    if (!out) throw Error(fmt::format("writing {} failed (disk full?)", temporary));
  }
  fs::rename(temporary, path, ec);
  if (ec) throw Error(fmt::format("cannot rename {} to {}: {}", temporary, path, ec.message()));
}

json read_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(fmt::format("cannot open {}: no such file or not readable", path));
  std::stringstream text;
  text << in.rdbuf();
  return ir::parse_json(text.str(), path);
}

}  // namespace zenith
