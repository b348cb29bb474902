#include "backends/dispatcher/dispatcher_plugin.h"

#include <exception>
#include <memory>
#include <vector>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/aten_call.h"
#include "core/dlpack_view.h"
#include "core/graph_json.h"
#include "core/plugin_guard.h"

namespace zenith::dispatcher_plugin {
namespace {

// One plugin library holds one dispatcher plugin, so its state is per library.
const zn_host_api* host = nullptr;
const Settings* settings = nullptr;

struct Kernel {
  ir::Graph group;
  std::vector<ir::AtenCall> calls;
  int device_index = 0;
  std::string name;  // its ops, e.g. "aten::convolution+aten::relu_"
};

zn_status* fail(zn_status_code code, const std::string& message) { return plugin_side::make_status(host, code, message); }

template <typename Body>
zn_status* guarded(Body&& body) noexcept {
  return plugin_side::guarded(host, std::forward<Body>(body));
}

ir::Graph parse_group(const char* json, size_t size) {
  return ir::from_json(ir::parse_json(std::string(json, size), "group from the host"));
}

// Empty when this plugin can run the group, else why not.
std::string refusal(const ir::Graph& group) {
  for (const auto& value : group.values) {
    if (value && value->type.device.type() != settings->device_type) {
      return fmt::format("value %{} is on {}; the {} plugin runs {} tensors only", value->id, value->type.device.str(),
                         settings->name, c10::DeviceTypeName(settings->device_type, /*lower_case=*/true));
    }
  }
  for (const auto& node : group.nodes) {
    if (!c10::Dispatcher::singleton().findSchema({node.op, node.overload})) {
      return fmt::format("no ATen operator {} in this LibTorch", node.qualified_name());
    }
  }
  return "";
}

int device_index_of(const ir::Graph& group) {
  for (const auto& value : group.values) {
    if (value) return value->type.device.has_index() ? value->type.device.index() : 0;
  }
  return 0;
}

zn_status* plugin_init(const char*, void** context) {
  *context = nullptr;
  if (settings->availability != nullptr) {
    if (auto why = settings->availability(); !why.empty()) return fail(ZN_STATUS_UNAVAILABLE, why);
  }
  return nullptr;
}

void plugin_shutdown(void*) {}

zn_status* plugin_query(void*, zn_query_args* args) {
  return guarded([&]() -> zn_status* {
    if (!ZN_HAS_FIELD(args, zn_query_args, reason_capacity)) return fail(ZN_STATUS_INVALID_ARGUMENT, "zn_query_args too short");
    plugin_side::answer_query(args, refusal(parse_group(args->group_json, args->group_json_size)));
    return nullptr;
  });
}

zn_status* plugin_compile(void*, zn_compile_args* args) {
  return guarded([&]() -> zn_status* {
    if (!ZN_HAS_FIELD(args, zn_compile_args, kernel)) return fail(ZN_STATUS_INVALID_ARGUMENT, "zn_compile_args too short");
    auto kernel = std::make_unique<Kernel>();
    kernel->group = parse_group(args->group_json, args->group_json_size);
    if (auto why = refusal(kernel->group); !why.empty()) return fail(ZN_STATUS_UNSUPPORTED, why);
    for (const auto& node : kernel->group.nodes) kernel->calls.emplace_back(node);
    kernel->device_index = device_index_of(kernel->group);
    // The ops are bound to the dispatcher, not compiled, and ATen takes any sizes.
    if (ZN_HAS_FIELD(args, zn_compile_args, from_cache)) args->from_cache = ZN_COMPILE_NOTHING;
    if (ZN_HAS_FIELD(args, zn_compile_args, max_extent)) {
      args->shape_generic = 1;
      args->max_extent = 0;
    }
    // ATen allocates its results: hand them over rather than copy them.
    if (ZN_HAS_FIELD(args, zn_compile_args, provides_outputs)) args->provides_outputs = 1;
    // ATen runs on the launch's stream (run_on_stream); an op that synchronizes fails the capture
    // loudly, and the host then runs that plan launch by launch.
    if (ZN_HAS_FIELD(args, zn_compile_args, graph_safe)) args->graph_safe = 1;
    if (ZN_HAS_FIELD(args, zn_compile_args, kernel_name)) {
      for (const auto& node : kernel->group.nodes) kernel->name += (kernel->name.empty() ? "" : "+") + node.op;
      args->kernel_name = kernel->name.c_str();
    }
    args->kernel = reinterpret_cast<zn_kernel*>(kernel.release());
    return nullptr;
  });
}

// Checks the launch's tensors against the group; returns why they do not fit, or empty. Sizes may
// differ from the group's: the kernel is shape-generic (zn_compile_args.shape_generic).
std::string launch_mismatch(const ir::Graph& group, const zn_launch_args* args) {
  if (args->num_inputs != group.inputs.size() || args->num_outputs != group.outputs.size()) {
    return fmt::format("the group takes {} inputs and {} outputs, the launch passed {} and {}", group.inputs.size(),
                       group.outputs.size(), args->num_inputs, args->num_outputs);
  }
  for (size_t i = 0; i < args->num_inputs; ++i) {
    const auto& view = args->inputs[i];
    const auto& expected = group.value(group.inputs[i]).type;
    bool fits = view.ndim == expected.rank() && from_dlpack_dtype(view.dtype) == expected.dtype;
    if (!fits) {
      return fmt::format("input {} is {} [{}], the group expects {}", i, ir::dtype_name(from_dlpack_dtype(view.dtype)),
                         fmt::join(view.shape, view.shape + view.ndim, ", "), expected.to_string());
    }
  }
  return "";
}

// Whether `result` shares memory with one of `others`.
bool shares_memory(const at::Tensor& result, const std::vector<at::Tensor>& others) {
  for (const auto& other : others) {
    if (other.defined() && other.has_storage() && result.storage().is_alias_of(other.storage())) return true;
  }
  return false;
}

void run_group(const Kernel& kernel, const zn_launch_args* args) {
  const auto& group = kernel.group;
  std::vector<at::Tensor> values(group.values.size());
  std::vector<at::Tensor> inputs;
  for (size_t i = 0; i < args->num_inputs; ++i) {
    values[group.inputs[i]] = wrap_dlpack(args->inputs[i]);
    inputs.push_back(values[group.inputs[i]]);
  }
  for (const auto& call : kernel.calls) {
    auto results = call.run([&](int id) -> const at::Tensor& { return values[id]; });
    for (size_t r = 0; r < results.size(); ++r) values[call.node().outputs[r]] = std::move(results[r]);
  }
  DLManagedTensor** provided = ZN_HAS_FIELD(args, zn_launch_args, provided) ? args->provided : nullptr;
  std::vector<at::Tensor> handed;  // what earlier outputs handed back
  for (size_t o = 0; o < args->num_outputs; ++o) {
    const auto& view = args->outputs[o];
    const auto& result = values[group.outputs[o]];
    if (provided != nullptr && view.data == nullptr && c10::multiply_integers(view.shape, view.shape + view.ndim) > 0) {
      if (!result.defined()) throw std::runtime_error(fmt::format("output {} was asked for and the group did not compute it", o));
      // A view of an input (or of another output) must not become a value of its own that a
      // later in-place step could write through.
      auto own = shares_memory(result, inputs) || shares_memory(result, handed) ? result.clone() : result;
      handed.push_back(own);
      provided[o] = lend_dlpack(std::move(own));
      continue;
    }
    auto out = wrap_dlpack(view);
    // A result an output mask left out (undefined) has an empty output: nothing to write.
    if (!result.defined() && out.numel() == 0) continue;
    // An in-place result already lives in the output's memory.
    if (out.numel() > 0 && result.data_ptr() == out.data_ptr() && result.strides() == out.strides()) continue;
    out.copy_(result);
  }
}

zn_status* plugin_launch(void*, const zn_launch_args* args) {
  return guarded([&]() -> zn_status* {
    if (!ZN_HAS_FIELD(args, zn_launch_args, stream)) return fail(ZN_STATUS_INVALID_ARGUMENT, "zn_launch_args too short");
    const auto* kernel = reinterpret_cast<const Kernel*>(args->kernel);
    if (kernel == nullptr) return fail(ZN_STATUS_INVALID_ARGUMENT, "no kernel");
    if (auto why = launch_mismatch(kernel->group, args); !why.empty()) return fail(ZN_STATUS_INVALID_ARGUMENT, why);
    if (settings->run_on_stream != nullptr) {
      settings->run_on_stream(args->stream, kernel->device_index, [&] { run_group(*kernel, args); });
    } else {
      run_group(*kernel, args);
    }
    return nullptr;
  });
}

void plugin_kernel_release(void*, zn_kernel* kernel) { delete reinterpret_cast<Kernel*>(kernel); }

}  // namespace

const zn_plugin_api* make_api(const Settings& plugin_settings, const zn_host_api* host_api, uint16_t host_major) {
  if (host_api == nullptr || host_major != ZN_ABI_MAJOR) return nullptr;
  host = host_api;
  settings = &plugin_settings;
  static const zn_plugin_api api = {
      sizeof(zn_plugin_api),
      ZN_ABI_MAJOR,
      ZN_ABI_MINOR,
      plugin_settings.name,
      plugin_settings.version,
      plugin_settings.build_id,
      plugin_settings.priority,
      plugin_init,
      plugin_shutdown,
      plugin_query,
      plugin_compile,
      plugin_launch,
      plugin_kernel_release,
  };
  return &api;
}

}  // namespace zenith::dispatcher_plugin
