// zenith::compile entry points that are not templates, and the environment overrides.
#include <cstdlib>

#include <fmt/format.h>

#include "runtime/engine.h"
#include "runtime/module_tree_slots.h"
#include "runtime/script_module_slots.h"
#include "capture/torchscript_forward.h"
#include "core/log.h"
#include "core/name_list.h"
#include "zenith/compile.h"

namespace zenith {
namespace {

// A 1|0 environment variable over a boolean option; anything else keeps the option, with a warning.
void override_switch(const char* variable, bool& option) {
  const char* value = std::getenv(variable);
  if (value == nullptr || *value == '\0') return;
  const std::string text = value;
  if (text == "1" || text == "true" || text == "yes") option = true;
  else if (text == "0" || text == "false" || text == "no") option = false;
  else log::warn("{}={} is not understood (use 1 or 0); keeping the compile option", variable, text);
}

// A number from the environment over an option (strtod: "0.25", "inf"); anything else keeps the
// option, with a warning.
void override_number(const char* variable, double& option) {
  const char* value = std::getenv(variable);
  if (value == nullptr || *value == '\0') return;
  char* end = nullptr;
  const double number = std::strtod(value, &end);
  if (end == value || *end != '\0') {
    log::warn("{}={} is not a number; keeping the compile option ({})", variable, value, option);
    return;
  }
  option = number;
}

void apply_environment(CompileOptions& options) {
  if (const char* value = std::getenv("ZENITH_BACKENDS"); value && *value) options.backends = split_names(value);
  if (const char* value = std::getenv("ZENITH_DUMP_DIR"); value && *value) options.dump_dir = value;
  if (const char* value = std::getenv("ZENITH_PROFILE_DIR"); value && *value) options.profile_dir = value;
  if (const char* value = std::getenv("ZENITH_DISABLE"); value && *value) {
    std::string text = value;
    if (text == "1" || text == "true" || text == "yes") options.disable = true;
    else if (text != "0" && text != "false" && text != "no")
      log::warn("ZENITH_DISABLE={} is not understood (use 1 or 0); Zenith stays enabled", text);
  }
  override_switch("ZENITH_TRAINING", options.compile_training);
  override_switch("ZENITH_CUDA_GRAPHS", options.cuda_graphs);
  override_switch("ZENITH_CHANNELS_LAST", options.channels_last);
  override_switch("ZENITH_KEEP_DERIVED", options.keep_derived_values);
  override_switch("ZENITH_PACK_PARAMETERS", options.pack_parameters);
  override_number("ZENITH_KEPT_WEIGHT_FRACTION", options.kept_weight_fraction);
  if (const char* value = std::getenv("ZENITH_DYNAMIC"); value && *value) {
    std::string text = value;
    if (text == "off") options.dynamic_shapes = DynamicShapes::Off;
    else if (text == "auto") options.dynamic_shapes = DynamicShapes::Auto;
    else log::warn("ZENITH_DYNAMIC={} is not understood (use off or auto); keeping the compile option", text);
  }
  if (const char* value = std::getenv("ZENITH_LOG"); value && *value) {
    try {
      options.log_level = log::parse(value);
    } catch (const Error&) {
      // log::level() already warned and uses warn.
    }
  }
}

}  // namespace

namespace detail {

std::shared_ptr<Engine> make_engine(ModuleAccess access, CompileOptions options) {
  apply_environment(options);
  log::request(options.log_level);
  if (options.plan_cache_size == 0) {
    throw Error::mismatch("CompileOptions::plan_cache_size", "at least 1", "0");
  }
  if (!(options.kept_weight_fraction >= 0)) {  // NaN too
    throw Error::mismatch("CompileOptions::kept_weight_fraction (or ZENITH_KEPT_WEIGHT_FRACTION)",
                          "a number of 0 or more (infinity keeps every weight copy)",
                          fmt::format("{}", options.kept_weight_fraction));
  }
  if (options.symbolic_plan_limit == 0) {
    throw Error::mismatch("CompileOptions::symbolic_plan_limit", "at least 1", "0");
  }
  if (options.profile_calls < 1) {
    throw Error::mismatch("CompileOptions::profile_calls", "at least 1", std::to_string(options.profile_calls));
  }
  if (options.verify_rtol < 0 || options.verify_atol < 0) {
    throw Error::mismatch("CompileOptions verify tolerances", "non-negative numbers",
                          fmt::format("rtol {} atol {}", options.verify_rtol, options.verify_atol));
  }
  return std::make_shared<Engine>(std::move(access), std::move(options));
}

void set_module_state(ModuleAccess& access, std::shared_ptr<torch::nn::Module> module) {
  auto slots = std::make_shared<ModuleTreeSlots>(module);
  access.state = [module, slots]() {
    slots->record();
    std::vector<std::pair<std::string, at::Tensor>> state;
    for (const auto& item : module->named_parameters(true)) state.emplace_back(item.key(), item.value());
    for (const auto& item : module->named_buffers(true)) state.emplace_back(item.key(), item.value());
    return state;
  };
  access.state_unchanged = [slots]() { return slots->unchanged(); };
}

c10::IValue engine_call(Engine& engine, std::vector<c10::IValue> args) { return engine.call(std::move(args)); }
CompileReport engine_last_report(const Engine& engine) { return engine.last_report(); }
CacheStats engine_stats(const Engine& engine) { return engine.stats(); }

}  // namespace detail

CompiledModule<c10::IValue(std::vector<c10::IValue>)> compile(torch::jit::Module module, CompileOptions options) {
  const auto& schema = module.get_method("forward").function().getSchema();
  detail::ModuleAccess access;
  access.arity = static_cast<int>(schema.arguments().size()) - 1;  // without self
  access.forward = [module](const std::vector<c10::IValue>& args) mutable { return module.forward(args); };
  access.trace_forward = capture::unfused_forward(module);
  access.straight_line = capture::straight_line(module);
  auto slots = std::make_shared<detail::ScriptModuleSlots>(module);
  access.state = [module, slots]() {
    slots->record();
    std::vector<std::pair<std::string, at::Tensor>> state;
    for (const auto& item : module.named_parameters(true)) state.emplace_back(item.name, item.value);
    for (const auto& item : module.named_buffers(true)) state.emplace_back(item.name, item.value);
    return state;
  };
  access.state_unchanged = [slots]() { return slots->unchanged(); };
  // Module::is_training looks the attribute up by name (a string built and the type's attributes
  // searched: 4.5% of a graphed BERT-base b1 call's host time in an H200 profile); its slot is
  // found once. A module without the attribute (one built in C++) asks Module::is_training.
  access.is_training = [module, slot = module._ivalue()->type()->findAttributeSlot("training")]() {
    return slot ? module._ivalue()->getSlot(*slot).toBool() : module.is_training();
  };
  // A forward on std::vector<IValue> is called with the vector itself.
  auto engine = detail::make_engine(std::move(access), std::move(options));
  return CompiledModule<c10::IValue(std::vector<c10::IValue>)>(std::move(engine));
}

}  // namespace zenith
