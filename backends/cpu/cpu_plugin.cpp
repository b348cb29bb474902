// The CPU backend plugin: runs any ATen op on CPU tensors through the dispatcher, so that every
// traceable model runs. It is the backend that accepts everything (on the CPU) and the reference
// the conformance test compares other plugins against.
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "core/aten_call.h"
#include "core/dlpack_view.h"
#include "core/graph_json.h"
#include "zenith/plugin.h"

namespace {

const zn_host_api* host = nullptr;

struct CpuKernel {
  zenith::ir::Graph group;
  std::vector<zenith::ir::AtenCall> calls;
};

zn_status* fail(zn_status_code code, const std::string& message) {
  return host->status_create(host->host_ctx, code, message.c_str());
}

// Runs `body`, turning any exception into a status: nothing may cross the C ABI.
template <typename Body>
zn_status* guarded(Body&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return fail(ZN_STATUS_OUT_OF_MEMORY, "out of memory");
  } catch (const c10::Error& error) {
    return fail(ZN_STATUS_INTERNAL, error.what_without_backtrace());  // the message, not a C++ backtrace
  } catch (const std::exception& error) {
    return fail(ZN_STATUS_INTERNAL, error.what());
  } catch (...) {
    return fail(ZN_STATUS_INTERNAL, "unknown exception");
  }
}

zenith::ir::Graph parse_group(const char* json, size_t size) {
  return zenith::ir::from_json(zenith::ir::parse_json(std::string(json, size), "group from the host"));
}

// Empty when the CPU plugin can run the group, else why not.
std::string refusal(const zenith::ir::Graph& group) {
  for (const auto& value : group.values) {
    if (value && !value->type.device.is_cpu()) {
      return fmt::format("value %{} is on {}; the CPU plugin runs CPU tensors only", value->id, value->type.device.str());
    }
  }
  for (const auto& node : group.nodes) {
    if (!c10::Dispatcher::singleton().findSchema({node.op, node.overload})) {
      return fmt::format("no ATen operator {} in this LibTorch", node.qualified_name());
    }
  }
  return "";
}

zn_status* cpu_init(const char*, void** context) {
  *context = nullptr;
  return nullptr;
}

void cpu_shutdown(void*) {}

zn_status* cpu_query(void*, zn_query_args* args) {
  return guarded([&]() -> zn_status* {
    if (!ZN_HAS_FIELD(args, zn_query_args, reason_capacity)) return fail(ZN_STATUS_INVALID_ARGUMENT, "zn_query_args too short");
    auto why = refusal(parse_group(args->group_json, args->group_json_size));
    args->supported = why.empty() ? 1 : 0;
    if (!why.empty() && args->reason != nullptr && args->reason_capacity > 0) {
      fmt::format_to_n(args->reason, args->reason_capacity - 1, "{}", why);
      args->reason[std::min(why.size(), args->reason_capacity - 1)] = '\0';
    }
    return nullptr;
  });
}

zn_status* cpu_compile(void*, zn_compile_args* args) {
  return guarded([&]() -> zn_status* {
    if (!ZN_HAS_FIELD(args, zn_compile_args, kernel)) return fail(ZN_STATUS_INVALID_ARGUMENT, "zn_compile_args too short");
    auto kernel = std::make_unique<CpuKernel>();
    kernel->group = parse_group(args->group_json, args->group_json_size);
    if (auto why = refusal(kernel->group); !why.empty()) return fail(ZN_STATUS_UNSUPPORTED, why);
    for (const auto& node : kernel->group.nodes) kernel->calls.emplace_back(node);
    args->kernel = reinterpret_cast<zn_kernel*>(kernel.release());
    return nullptr;
  });
}

zn_status* cpu_launch(void*, const zn_launch_args* args) {
  return guarded([&]() -> zn_status* {
    if (!ZN_HAS_FIELD(args, zn_launch_args, stream)) return fail(ZN_STATUS_INVALID_ARGUMENT, "zn_launch_args too short");
    const auto* kernel = reinterpret_cast<const CpuKernel*>(args->kernel);
    if (kernel == nullptr) return fail(ZN_STATUS_INVALID_ARGUMENT, "no kernel");
    const auto& group = kernel->group;
    if (args->num_inputs != group.inputs.size() || args->num_outputs != group.outputs.size()) {
      return fail(ZN_STATUS_INVALID_ARGUMENT,
                  fmt::format("the group takes {} inputs and {} outputs, the launch passed {} and {}", group.inputs.size(),
                              group.outputs.size(), args->num_inputs, args->num_outputs));
    }
    std::vector<at::Tensor> values(group.values.size());
    for (size_t i = 0; i < args->num_inputs; ++i) {
      values[group.inputs[i]] = zenith::wrap_dlpack(args->inputs[i]);
      const auto& expected = group.value(group.inputs[i]).type;
      if (values[group.inputs[i]].sizes() != c10::IntArrayRef(expected.sizes) ||
          values[group.inputs[i]].scalar_type() != expected.dtype) {
        return fail(ZN_STATUS_INVALID_ARGUMENT, fmt::format("input {} is {} {}, the group expects {}", i,
                                                            c10::toString(values[group.inputs[i]].scalar_type()),
                                                            c10::str(values[group.inputs[i]].sizes()), expected.to_string()));
      }
    }
    for (const auto& call : kernel->calls) {
      auto results = call.run([&](int id) -> const at::Tensor& { return values[id]; });
      for (size_t r = 0; r < results.size(); ++r) values[call.node().outputs[r]] = std::move(results[r]);
    }
    for (size_t o = 0; o < args->num_outputs; ++o) {
      auto out = zenith::wrap_dlpack(args->outputs[o]);
      const auto& result = values[group.outputs[o]];
      // An in-place result already lives in the output's memory.
      if (out.numel() > 0 && result.data_ptr() == out.data_ptr() && result.strides() == out.strides()) continue;
      out.copy_(result);
    }
    return nullptr;
  });
}

void cpu_kernel_release(void*, zn_kernel* kernel) { delete reinterpret_cast<CpuKernel*>(kernel); }

const zn_plugin_api kApi = {
    sizeof(zn_plugin_api),
    ZN_ABI_MAJOR,
    ZN_ABI_MINOR,
    /*name=*/"cpu",
    /*version=*/"0.1.0",
    /*build_id=*/"torch " ZENITH_TORCH_VERSION,
    /*default_priority=*/100,
    cpu_init,
    cpu_shutdown,
    cpu_query,
    cpu_compile,
    cpu_launch,
    cpu_kernel_release,
};

}  // namespace

extern "C" ZN_EXPORT const zn_plugin_api* zn_plugin_get_api(const zn_host_api* host_api, uint16_t major, uint16_t) {
  if (host_api == nullptr || major != ZN_ABI_MAJOR) return nullptr;
  host = host_api;
  return &kApi;
}
