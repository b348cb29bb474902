#include "core/backend.h"

#include <fmt/format.h>

#include "core/dlpack_view.h"
#include "core/host_api.h"
#include "zenith/error.h"

namespace zenith {
namespace {

std::string text_or(const char* text, const char* fallback) { return text != nullptr ? text : fallback; }

void raise(const Backend& backend, const char* what, const StatusReport& status) {
  auto message = fmt::format("backend '{}' ({}) failed to {}: {}: {}", backend.name(), backend.path(), what,
                             status_code_name(status.code), status.message);
  if (status.code == ZN_STATUS_OUT_OF_MEMORY) throw BackendOutOfMemory(message);
  throw Error(message);
}

}  // namespace

Kernel::~Kernel() { backend_->release(handle_); }

Backend::Backend(const zn_plugin_api* api, void* context, std::string path)
    : api_(api),
      context_(context),
      path_(std::move(path)),
      name_(text_or(api->name, "")),
      version_(text_or(api->version, "")),
      build_id_(text_or(api->build_id, "")),
      priority_(api->default_priority) {}

std::optional<std::string> Backend::query(const std::string& group_json) const {
  char reason[512] = {0};
  zn_query_args args{};
  args.struct_size = sizeof(args);
  args.group_json = group_json.data();
  args.group_json_size = group_json.size();
  args.reason = reason;
  args.reason_capacity = sizeof(reason);
  auto status = take_status(api_->query(context_, &args));
  if (status.code != ZN_STATUS_OK) return fmt::format("query failed: {}: {}", status_code_name(status.code), status.message);
  if (args.supported) return std::nullopt;
  reason[sizeof(reason) - 1] = '\0';
  return reason[0] != '\0' ? std::string(reason) : std::string("declined without a reason");
}

std::shared_ptr<Kernel> Backend::compile(const std::string& group_json, const std::string& options_json,
                                         CompileOutcome* outcome) const {
  zn_compile_args args{};
  args.struct_size = sizeof(args);
  args.group_json = group_json.data();
  args.group_json_size = group_json.size();
  args.options_json = options_json.c_str();
  auto status = take_status(api_->compile(context_, &args));
  if (status.code != ZN_STATUS_OK) raise(*this, "compile a group", status);
  if (args.kernel == nullptr) raise(*this, "compile a group", {ZN_STATUS_INTERNAL, "it returned no kernel"});
  if (outcome != nullptr) {
    // A 1.0 plugin leaves the field 0 (compiled); an unknown value is read as compiled too.
    bool known = args.from_cache == ZN_COMPILE_FROM_CACHE || args.from_cache == ZN_COMPILE_NOTHING;
    outcome->source = known ? static_cast<zn_compile_source>(args.from_cache) : ZN_COMPILE_COMPILED;
    // Older plugins leave both 0: not shape-generic.
    outcome->shape_generic = args.shape_generic == 1;
    outcome->max_extent = args.max_extent > 0 ? args.max_extent : 0;
    outcome->provides_outputs = args.provides_outputs == 1;
    outcome->graph_safe = args.graph_safe == 1;
  }
  // Copied now: the name need only live until compile returned (a 1.4 plugin leaves it NULL).
  std::string kernel_name = args.kernel_name != nullptr ? args.kernel_name : "";
  return std::make_shared<Kernel>(this, args.kernel, args.provides_outputs == 1, args.graph_safe == 1,
                                  std::move(kernel_name));
}

void Backend::launch(const Kernel& kernel, const std::vector<DLTensor>& inputs, const std::vector<DLTensor>& outputs,
                     void* stream, std::vector<DLManagedTensor*>* provided,
                     const std::uint8_t* inputs_unwritten) const {
  zn_launch_args args{};
  args.struct_size = sizeof(args);
  args.kernel = kernel.handle();
  args.inputs = inputs.data();
  args.num_inputs = inputs.size();
  args.outputs = outputs.data();
  args.num_outputs = outputs.size();
  args.stream = stream;
  args.inputs_unwritten = inputs_unwritten;
  if (provided != nullptr) {
    if (!kernel.provides_outputs() || provided->size() != outputs.size()) {
      throw Error(fmt::format("launching a {} kernel: outputs in its own memory asked of a kernel that cannot give them",
                              name_));
    }
    args.provided = provided->data();
  }
  auto status = take_status(api_->launch(context_, &args));
  if (status.code != ZN_STATUS_OK) {
    if (provided != nullptr) release_dlpack(*provided);
    raise(*this, "launch a kernel", status);
  }
}

void Backend::release(zn_kernel* kernel) const { api_->kernel_release(context_, kernel); }

}  // namespace zenith
