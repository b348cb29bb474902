#include "plugins/torch_gpu/cudnn_scaled_convolution.h"

#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <map>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cudnn/Handle.h>
#include <c10/cuda/CUDAGuard.h>
#include <cudnn.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/convolution_relu.h"
#include "core/convolution_scale_relu.h"
#include "core/log.h"
#include "plugins/torch_gpu/full_dependency.h"

namespace zenith::torch_gpu {
namespace {

using ir::ScaledConvolution;

// Why a graph cannot be built; the call then runs the written form.
struct Unsupported {
  std::string reason;
};

void check(cudnnStatus_t status, const char* what) {
  if (status != CUDNN_STATUS_SUCCESS) throw Unsupported{fmt::format("{}: {}", what, cudnnGetErrorString(status))};
}

// One cuDNN backend descriptor, destroyed with its owner.
class Descriptor {
 public:
  explicit Descriptor(cudnnBackendDescriptorType_t type) {
    check(cudnnBackendCreateDescriptor(type, &raw_), "cudnnBackendCreateDescriptor");
  }
  ~Descriptor() {
    if (raw_ != nullptr) cudnnBackendDestroyDescriptor(raw_);
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;

  cudnnBackendDescriptor_t get() const { return raw_; }
  template <typename T>
  void set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, const T* values, std::int64_t count = 1) {
    check(cudnnBackendSetAttribute(raw_, name, type, count, values), "cudnnBackendSetAttribute");
  }
  void set(cudnnBackendAttributeName_t name, const Descriptor& other) {
    auto raw = other.get();
    set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, &raw);
  }
  void finalize(const char* what) { check(cudnnBackendFinalize(raw_), what); }

 private:
  cudnnBackendDescriptor_t raw_ = nullptr;
};

// The tensors' ids in the graph and the variant pack.
enum Uid : std::int64_t { kInput = 1, kWeight, kScale, kShift, kResidual, kOutput, kConvolved, kScaled, kShifted, kAdded };

std::vector<std::int64_t> channels_last_strides(const std::vector<std::int64_t>& sizes) {
  const auto c = sizes[1], h = sizes[2], w = sizes[3];
  return {c * h * w, 1, w * c, c};
}

// The result as the op lays it out (channels-last here: declined() takes no other input).
at::Tensor empty_result(const ScaledConvolution& call) {
  return ir::convolution_result_like(call.input, call.weight, call.stride, call.padding, call.dilation);
}

// A finalized execution plan and every descriptor it was built from.
struct Plan {
  std::vector<std::unique_ptr<Descriptor>> parts;
  std::unique_ptr<Descriptor> plan;
  std::int64_t workspace_bytes = 0;
};

class PlanBuilder {
 public:
  PlanBuilder(const ScaledConvolution& call, cudnnHandle_t handle) : call_(call), handle_(handle) {}

  std::shared_ptr<Plan> build() {
    const auto io = call_.input.scalar_type() == at::kHalf ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16;
    const auto out_sizes = empty_result(call_).sizes().vec();
    const auto per_channel = std::vector<std::int64_t>{1, out_sizes[1], 1, 1};
    const auto per_channel_strides = std::vector<std::int64_t>{out_sizes[1], 1, out_sizes[1], out_sizes[1]};
    auto& x = tensor(kInput, io, call_.input.sizes().vec(), false);
    auto& w = tensor(kWeight, io, call_.weight.sizes().vec(), false);
    auto& convolved = tensor(kConvolved, CUDNN_DATA_FLOAT, out_sizes, true);
    auto& scale = tensor(kScale, CUDNN_DATA_FLOAT, per_channel, false, per_channel_strides);
    auto& shift = tensor(kShift, CUDNN_DATA_FLOAT, per_channel, false, per_channel_strides);
    auto& scaled = tensor(kScaled, CUDNN_DATA_FLOAT, out_sizes, true);
    auto& shifted = tensor(kShifted, CUDNN_DATA_FLOAT, out_sizes, true);
    auto& out = tensor(kOutput, io, out_sizes, false);
    std::vector<const Descriptor*> ops = {&convolution(x, w, convolved), &pointwise(CUDNN_POINTWISE_MUL, convolved, &scale, scaled),
                                          &pointwise(CUDNN_POINTWISE_ADD, scaled, &shift, shifted)};
    const Descriptor* before_relu = &shifted;
    if (residual()) {
      auto& z = tensor(kResidual, io, out_sizes, false);
      auto& added = tensor(kAdded, CUDNN_DATA_FLOAT, out_sizes, true);
      ops.push_back(&pointwise(CUDNN_POINTWISE_ADD, shifted, &z, added));
      before_relu = &added;
    }
    ops.push_back(&pointwise(CUDNN_POINTWISE_RELU_FWD, *before_relu, nullptr, out));
    auto& graph = part(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    std::vector<cudnnBackendDescriptor_t> raw_ops;
    for (const auto* op : ops) raw_ops.push_back(op->get());
    graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, raw_ops.data(),
              static_cast<std::int64_t>(raw_ops.size()));
    graph.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, &handle_);
    graph.finalize("the operation graph");
    return plan_for(graph);
  }

 private:
  bool residual() const { return call_.residual && call_.residual->defined(); }

  Descriptor& part(cudnnBackendDescriptorType_t type) {
    plan_->parts.push_back(std::make_unique<Descriptor>(type));
    return *plan_->parts.back();
  }

  Descriptor& tensor(std::int64_t uid, cudnnDataType_t type, const std::vector<std::int64_t>& sizes, bool is_virtual,
                     std::vector<std::int64_t> strides = {}) {
    if (strides.empty()) strides = channels_last_strides(sizes);
    auto& t = part(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const std::int64_t alignment = 16;
    t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, &type);
    t.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, sizes.data(), 4);
    t.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, strides.data(), 4);
    t.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, &uid);
    t.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, &alignment);
    t.set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, &is_virtual);
    t.finalize("a tensor descriptor");
    return t;
  }

  Descriptor& convolution(const Descriptor& x, const Descriptor& w, const Descriptor& y) {
    auto& settings = part(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
    const auto compute = CUDNN_DATA_FLOAT;
    const auto mode = CUDNN_CROSS_CORRELATION;
    const std::int64_t dims = 2;
    settings.set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, &compute);
    settings.set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, &mode);
    settings.set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, &dims);
    settings.set(CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, call_.dilation.data(), 2);
    settings.set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, call_.stride.data(), 2);
    settings.set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, call_.padding.data(), 2);
    settings.set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, call_.padding.data(), 2);
    settings.finalize("the convolution descriptor");
    auto& op = part(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
    const float one = 1, zero = 0;
    op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, x);
    op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, w);
    op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, y);
    op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, settings);
    op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, &one);
    op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, &zero);
    op.finalize("the convolution");
    return op;
  }

  // y = mode(x, b) (b absent for the ReLU), computed in float32.
  Descriptor& pointwise(cudnnPointwiseMode_t mode, const Descriptor& x, const Descriptor* b, const Descriptor& y) {
    auto& settings = part(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    const auto precision = CUDNN_DATA_FLOAT;
    settings.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, &mode);
    settings.set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, &precision);
    settings.finalize("a pointwise descriptor");
    auto& op = part(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    op.set(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, settings);
    op.set(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
    if (b != nullptr) op.set(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, *b);
    op.set(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
    op.finalize("a pointwise operation");
    return op;
  }

  // The first of the heuristic's engine configurations that builds. Building compiles the
  // runtime-fusion engine's kernel (tens to hundreds of milliseconds).
  std::shared_ptr<Plan> plan_for(const Descriptor& graph) {
    auto& heuristic = part(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    const auto mode = CUDNN_HEUR_MODE_A;
    heuristic.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph);
    heuristic.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, &mode);
    heuristic.finalize("the engine heuristic");
    constexpr std::int64_t kConfigs = 8;
    std::vector<cudnnBackendDescriptor_t> configs;
    for (std::int64_t k = 0; k < kConfigs; ++k) configs.push_back(part(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR).get());
    std::int64_t found = 0;
    check(cudnnBackendGetAttribute(heuristic.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                   kConfigs, &found, configs.data()),
          "the engine heuristic's results");
    std::string refusals;
    for (std::int64_t k = 0; k < found; ++k) {
      auto candidate = std::make_unique<Descriptor>(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      candidate->set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, &handle_);
      candidate->set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, &configs[k]);
      const auto status = cudnnBackendFinalize(candidate->get());
      if (status != CUDNN_STATUS_SUCCESS) {
        refusals += fmt::format(" {}", cudnnGetErrorString(status));
        continue;
      }
      std::int64_t count = 0;
      check(cudnnBackendGetAttribute(candidate->get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                                     &count, &plan_->workspace_bytes),
            "the plan's workspace size");
      plan_->plan = std::move(candidate);
      return std::move(plan_);
    }
    throw Unsupported{fmt::format("none of the heuristic's {} engine configurations built:{}", found, refusals)};
  }

  const ScaledConvolution& call_;
  cudnnHandle_t handle_;
  std::shared_ptr<Plan> plan_ = std::make_shared<Plan>();
};

bool aligned(const at::Tensor& t) { return reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 == 0; }

bool packed_channels_last(const at::Tensor& t) {
  return t.dim() == 4 && t.is_contiguous(at::MemoryFormat::ChannelsLast) && aligned(t);
}

bool per_channel_vector(const at::Tensor& t, const at::Tensor& input, std::int64_t channels) {
  return t.scalar_type() == at::kFloat && t.device() == input.device() && t.dim() == 1 && t.size(0) == channels &&
         t.is_contiguous() && aligned(t);
}

// Why the runner leaves a call to the written form, or empty when it takes it.
std::string declined(const ScaledConvolution& call) {
  const auto dtype = call.input.scalar_type();
  if (dtype != at::kHalf && dtype != at::kBFloat16) return "not float16 or bfloat16";
  auto& context = at::globalContext();
  if (!context.userEnabledCuDNN() || context.deterministicCuDNN()) return "cuDNN disabled or asked to be deterministic";
  if (call.groups != 1 || call.stride.size() != 2) return "not a 2-D convolution of one group";
  if (call.weight.scalar_type() != dtype || call.weight.device() != call.input.device()) return "weight of another kind";
  if (!packed_channels_last(call.input) || !packed_channels_last(call.weight)) return "not channels-last";
  const bool residual = call.residual && call.residual->defined();
  if (residual && (call.residual->scalar_type() != dtype || call.residual->device() != call.input.device() ||
                   !packed_channels_last(*call.residual))) {
    return "residual of another kind or layout";
  }
  const auto channels = call.weight.size(0);
  if (!per_channel_vector(call.scale, call.input, channels) || !per_channel_vector(call.shift, call.input, channels)) {
    return "scale or shift not float32 vectors of the output's channels";
  }
  return "";
}

// The largest power of two up to 256 dividing every pointer the call hands cuDNN: a plan is
// built and checked per alignment, should an engine's kernel assume more than the 16 bytes its
// tensors declare.
std::uint64_t pointer_alignment(const ScaledConvolution& call) {
  std::uint64_t bits = 256;
  for (const at::Tensor* t : {&call.input, &call.weight, &call.scale, &call.shift}) {
    bits |= reinterpret_cast<std::uintptr_t>(t->data_ptr());
  }
  if (call.residual && call.residual->defined()) bits |= reinterpret_cast<std::uintptr_t>(call.residual->data_ptr());
  return bits & (~bits + 1);
}

// What a plan is built for, as numbers: made at every call launch by launch, so no text.
using PlanKey = std::vector<std::int64_t>;

PlanKey plan_key(const ScaledConvolution& call) {
  PlanKey key = {call.input.get_device(), static_cast<std::int64_t>(call.input.scalar_type()),
                 call.residual && call.residual->defined(), static_cast<std::int64_t>(pointer_alignment(call))};
  for (auto list : {call.input.sizes(), call.weight.sizes(), call.stride, call.padding, call.dilation}) {
    key.push_back(static_cast<std::int64_t>(list.size()));
    key.insert(key.end(), list.begin(), list.end());
  }
  return key;
}

// The key as log lines name it.
std::string describe(const ScaledConvolution& call) {
  return fmt::format("{} {} x{} w{} s{} p{} d{} z{} a{}", call.input.device().str(),
                     c10::toString(call.input.scalar_type()), fmt::join(call.input.sizes(), ","),
                     fmt::join(call.weight.sizes(), ","), fmt::join(call.stride, ","), fmt::join(call.padding, ","),
                     fmt::join(call.dilation, ","), call.residual && call.residual->defined(), pointer_alignment(call));
}

bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  return cudaStreamIsCapturing(stream, &status) == cudaSuccess && status != cudaStreamCaptureStatusNone;
}

// Enqueues `plan` over the call's tensors into `out`; false (nothing enqueued) when cuDNN refuses.
bool execute(const Plan& plan, const ScaledConvolution& call, const at::Tensor& out, cudnnHandle_t handle) {
  at::Tensor workspace;
  if (plan.workspace_bytes > 0) workspace = at::empty({plan.workspace_bytes}, call.input.options().dtype(at::kByte));
  std::vector<std::int64_t> uids = {kInput, kWeight, kScale, kShift, kOutput};
  std::vector<void*> pointers = {call.input.data_ptr(), call.weight.data_ptr(), call.scale.data_ptr(),
                                 call.shift.data_ptr(), out.data_ptr()};
  if (call.residual && call.residual->defined()) {
    uids.push_back(kResidual);
    pointers.push_back(call.residual->data_ptr());
  }
  void* workspace_data = workspace.defined() ? workspace.data_ptr() : nullptr;
  try {
    Descriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, uids.data(), static_cast<std::int64_t>(uids.size()));
    pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, pointers.data(),
             static_cast<std::int64_t>(pointers.size()));
    pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, &workspace_data);
    pack.finalize("the variant pack");
    cudaStream_t stream = nullptr;
    check(cudnnGetStream(handle, &stream), "cudnnGetStream");
    // cuDNN's fused kernel, a programmatic dependent, computed from data the kernel before it had
    // not written yet where that kernel lets its dependents start early (full_dependency.h).
    if (auto why = depend_fully_on_work_before(stream); !why.empty()) throw Unsupported{why};
    check(cudnnBackendExecute(handle, plan.plan->get(), pack.get()), "cudnnBackendExecute");
  } catch (const Unsupported& failed) {
    log::warn("the cuDNN fused convolution epilogue did not run ({}); the written ops run", failed.reason);
    return false;
  }
  return true;
}

// A new plan runs once on the call's own tensors into an output filled with NaN and is kept only
// when it agrees with the written ops there (ir::convolution_scale_relu_disagreement): a graph that
// disagrees is never used, whatever the engine's reason. Empty when it agrees.
std::string disagreement(const Plan& plan, const ScaledConvolution& call, cudnnHandle_t handle) {
  auto out = empty_result(call).fill_(std::numeric_limits<float>::quiet_NaN());
  if (!execute(plan, call, out, handle)) return "it did not run";
  return ir::convolution_scale_relu_disagreement(call, out);
}

// Plans by shape and alignment, for the process. Never destroyed: the process's exit may already
// have torn down cuDNN when static destructors run, and unloading the plugin removes the runner
// first.
class PlanCache {
 public:
  // The plan for this call's shape, built and checked now if it was not (nullptr when no engine
  // takes it or it disagreed with the written ops).
  std::shared_ptr<const Plan> find_or_build(const ScaledConvolution& call, cudnnHandle_t handle, cudaStream_t stream) {
    const auto key = plan_key(call);
    const std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = plans_.find(key); it != plans_.end()) return it->second;
    // Building compiles a kernel and checking it waits for its result, which a stream under
    // capture must not see: left to a later call.
    if (capturing(stream)) return nullptr;
    std::shared_ptr<const Plan> plan;
    try {
      plan = PlanBuilder(call, handle).build();
    } catch (const Unsupported& unsupported) {
      log::info("cuDNN builds no fused convolution epilogue for {} ({}); the written ops run", describe(call),
                unsupported.reason);
    }
    if (plan != nullptr) {
      if (const auto why = disagreement(*plan, call, handle); !why.empty()) {
        log::warn("cuDNN's fused convolution epilogue for {} disagreed with the written ops ({}); the written ops run",
                  describe(call), why);
        plan = nullptr;
      } else {
        log::debug("cuDNN fused convolution epilogue built and checked for {} (workspace {} bytes)", describe(call),
                   plan->workspace_bytes);
      }
    }
    plans_.emplace(key, plan);
    return plan;
  }

 private:
  std::mutex mutex_;
  std::map<PlanKey, std::shared_ptr<const Plan>> plans_;
};

PlanCache& plan_cache() {
  static auto* cache = new PlanCache;
  return *cache;
}

std::optional<at::Tensor> run_fused(const ScaledConvolution& call) {
  if (const auto reason = declined(call); !reason.empty()) {
    log::debug("zenith::convolution_scale_relu runs its written ops: {}", reason);
    return std::nullopt;
  }
  const c10::cuda::CUDAGuard device(call.input.device());
  cudnnHandle_t handle = at::native::getCudnnHandle();
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  if (cudnnSetStream(handle, stream) != CUDNN_STATUS_SUCCESS) return std::nullopt;
  const auto plan = plan_cache().find_or_build(call, handle, stream);
  if (plan == nullptr) return std::nullopt;
  auto out = empty_result(call);
  if (!execute(*plan, call, out, handle)) return std::nullopt;
  return out;
}

}  // namespace

void install_cudnn_scaled_convolution() { ir::set_scaled_convolution_runner(&run_fused); }

void remove_cudnn_scaled_convolution() { ir::set_scaled_convolution_runner({}); }

}  // namespace zenith::torch_gpu
