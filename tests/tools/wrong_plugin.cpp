// A plugin that claims single-node relu, neg, exp and sigmoid groups and computes them wrongly: relu
// as abs, neg not at all (its outputs stay as the host left them), exp right into host outputs but,
// when asked to hand its output back (ABI 1.4), hands back the input itself, and sigmoid right on a
// kernel's first launch only: later launches repeat the first one's result, as a plan replaying
// values captured at trace time would. The failure paths of zenith-conformance and of
// `zenith-inspect replay` are tested against it. Its high priority makes replay choose it.
#include <exception>
#include <string>

#include <ATen/ATen.h>

#include "core/dlpack_view.h"
#include "core/graph_json.h"
#include "zenith/plugin.h"

namespace {

const zn_host_api* host = nullptr;

struct WrongKernel {
  std::string op;
  at::Tensor first_result;  // sigmoid: what the first launch computed, repeated ever after
};

zn_status* fail(zn_status_code code, const std::string& message) {
  return host->status_create(host->host_ctx, code, message.c_str());
}

// The op of a group this plugin claims, or empty.
std::string claimed_op(const char* json, size_t size) {
  auto group = zenith::ir::from_json(zenith::ir::parse_json(std::string(json, size), "group"));
  if (group.nodes.size() != 1 || group.inputs.size() != 1) return "";
  const auto& op = group.nodes[0].op;
  if (op != "aten::relu" && op != "aten::neg" && op != "aten::exp" && op != "aten::sigmoid") return "";
  return group.value(group.inputs[0]).type.device.is_cpu() ? op : "";
}

zn_status* wrong_init(const char*, void** context) {
  *context = nullptr;
  return nullptr;
}

void wrong_shutdown(void*) {}

zn_status* wrong_query(void*, zn_query_args* args) {
  try {
    args->supported = claimed_op(args->group_json, args->group_json_size).empty() ? 0 : 1;
    return nullptr;
  } catch (const std::exception& e) {
    return fail(ZN_STATUS_INVALID_ARGUMENT, e.what());
  }
}

zn_status* wrong_compile(void*, zn_compile_args* args) {
  try {
    auto op = claimed_op(args->group_json, args->group_json_size);
    if (op.empty()) return fail(ZN_STATUS_UNSUPPORTED, "only single relu, neg, exp and sigmoid nodes");
    args->kernel = reinterpret_cast<zn_kernel*>(new WrongKernel{op, {}});
    if (op == "aten::exp" && ZN_HAS_FIELD(args, zn_compile_args, provides_outputs)) args->provides_outputs = 1;
    return nullptr;
  } catch (const std::exception& e) {
    return fail(ZN_STATUS_INVALID_ARGUMENT, e.what());
  }
}

zn_status* wrong_launch(void*, const zn_launch_args* args) {
  if (args->num_inputs != 1 || args->num_outputs != 1) return fail(ZN_STATUS_INVALID_ARGUMENT, "one input, one output");
  auto* kernel = reinterpret_cast<WrongKernel*>(args->kernel);
  if (kernel->op == "aten::relu") zenith::wrap_dlpack(args->outputs[0]).copy_(zenith::wrap_dlpack(args->inputs[0]).abs());
  if (kernel->op == "aten::sigmoid") {
    if (!kernel->first_result.defined()) kernel->first_result = zenith::wrap_dlpack(args->inputs[0]).sigmoid();
    zenith::wrap_dlpack(args->outputs[0]).copy_(kernel->first_result);
  }
  if (kernel->op == "aten::exp") {
    const bool asked = ZN_HAS_FIELD(args, zn_launch_args, provided) && args->provided != nullptr &&
                       args->outputs[0].data == nullptr;
    if (asked) {
      args->provided[0] = zenith::lend_dlpack(zenith::wrap_dlpack(args->inputs[0]));  // shares the input's memory
    } else {
      zenith::wrap_dlpack(args->outputs[0]).copy_(zenith::wrap_dlpack(args->inputs[0]).exp());
    }
  }
  return nullptr;
}

void wrong_release(void*, zn_kernel* kernel) { delete reinterpret_cast<WrongKernel*>(kernel); }

const zn_plugin_api kApi = {
    sizeof(zn_plugin_api), ZN_ABI_MAJOR, ZN_ABI_MINOR, "wrong", "0.0.1", "test plugin: wrong results", 500,
    wrong_init, wrong_shutdown, wrong_query, wrong_compile, wrong_launch, wrong_release,
};

}  // namespace

extern "C" ZN_EXPORT const zn_plugin_api* zn_plugin_get_api(const zn_host_api* host_api, uint16_t major, uint16_t) {
  if (host_api == nullptr || major != ZN_ABI_MAJOR) return nullptr;
  host = host_api;
  return &kApi;
}
