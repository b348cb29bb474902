// The inference rewrites on the GPU, against eager: batch norms decomposed into the kernel of the
// ReLU and residual add after them (passes/batch_norm_decomposition.h) or folded into the
// convolution before them, with its residual add and ReLU (passes/convolution_epilogue.h), or run
// in cuDNN's epilogue as a scale and shift without a weight copy (core/convolution_scale_relu.h),
// attention written out by hand with a padding mask (data: it stays written out,
// passes/attention_fusion.h), an NCHW network's convolutions run channels-last over weight copies
// kept as derived values (passes/channels_last_convolutions.h, runtime/derived_values.h),
// projections of one input run as one product over their weights concatenated
// (passes/sibling_products.h), a derived value too, the weights moved into it and their old memory
// handed back to the device (runtime/parameter_packing.h), and a number made on the CPU from a size
// read on the device (passes/scalar_constants_on_device.h). Every call has fresh inputs, the third
// and later replay a CUDA graph, and parameters and buffers updated in place or replaced between
// calls are seen.
// Label gpu.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include "common/lowest_finite.h"
#include "common/pass_counter.h"
#include "common/temp_folder.h"
#include "common_relative_error.h"
#include "core/convolution_scale_relu.h"
#include "core/dump.h"
#include "gpu/allocator_bytes.h"
#include "gpu/two_layer_mlp.h"
#include "zenith/compile.h"

namespace zenith {
namespace {

using testing::no_fallback;
using testing::pass_counter;
using testing::allocated_bytes;
using testing::allocated_peak_bytes;
using testing::relative_error;
using testing::reset_peaks;
using testing::reserved_bytes;

const torch::Device kDevice(torch::kCUDA);
constexpr int kCalls = 5;  // the capture, one run launch by launch, a graph capture, two replays

// float32: the same convolution and products as eager, arithmetic in another order (x * a + c for
// batch norm, a fused kernel's sums for attention): 1e-4 of the largest value. float16 and
// bfloat16 round once at the store where eager rounds after every op: a few units in the last
// place, 1e-2 and 4e-2.
double tolerance(c10::ScalarType dtype) { return dtype == at::kFloat ? 1e-4 : dtype == at::kHalf ? 1e-2 : 4e-2; }

// zenith::convolution_scale_relu through the dispatcher as a plan calls it (dilation 1, one group,
// with its ReLU).
at::Tensor scaled_convolution(const at::Tensor& x, const at::Tensor& w, const at::Tensor& scale, const at::Tensor& shift,
                              const std::optional<at::Tensor>& z, std::int64_t stride, std::int64_t padding) {
  static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow(ir::kConvolutionScaleReluOp, "").typed<
      at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                 const std::optional<at::Tensor>&, at::IntArrayRef, at::IntArrayRef, at::IntArrayRef, int64_t, bool)>();
  return op.call(x, w, scale, shift, z, {stride, stride}, {padding, padding}, {1, 1}, 1, true);
}

// A convolution of ResNet-50's: channels in and out, kernel size, stride, input side.
struct ConvShape {
  std::int64_t in, out, kernel, stride, side;
};

// One call of the op on fresh draws (channels-last input, weight and residual; scale and shift
// float32), with its result in float32 arithmetic.
struct ScaledCall {
  at::Tensor x, w, scale, shift;
  std::optional<at::Tensor> z;
  std::int64_t stride = 1, padding = 0;
  at::Tensor want;

  static ScaledCall draw(const ConvShape& shape, std::int64_t batch, c10::ScalarType dtype, bool residual) {
    const auto options = torch::TensorOptions().device(kDevice).dtype(dtype);
    ScaledCall c;
    c.stride = shape.stride;
    c.padding = shape.kernel / 2;
    const auto side = (shape.side + 2 * c.padding - shape.kernel) / shape.stride + 1;
    c.x = torch::randn({batch, shape.in, shape.side, shape.side}, options).contiguous(at::MemoryFormat::ChannelsLast);
    c.w = (torch::randn({shape.out, shape.in, shape.kernel, shape.kernel}, options.dtype(at::kFloat)) /
           std::sqrt(static_cast<double>(shape.in * shape.kernel * shape.kernel)))
              .to(dtype)
              .contiguous(at::MemoryFormat::ChannelsLast);
    c.scale = torch::rand({shape.out}, options.dtype(at::kFloat)) + 0.5;
    c.shift = torch::randn({shape.out}, options.dtype(at::kFloat)) * 0.1;
    if (residual) c.z = torch::randn({batch, shape.out, side, side}, options).contiguous(at::MemoryFormat::ChannelsLast);
    auto want = torch::conv2d(c.x.to(at::kFloat), c.w.to(at::kFloat), {}, c.stride, c.padding) *
                    c.scale.view({1, -1, 1, 1}) +
                c.shift.view({1, -1, 1, 1});
    if (c.z) want = want + c.z->to(at::kFloat);
    c.want = torch::relu(want);
    return c;
  }

  at::Tensor run() const { return scaled_convolution(x, w, scale, shift, z, stride, padding); }

  // Frees a NaN-filled block of the result's size, which the caching allocator hands the result.
  void poison_next_result() const {
    auto poison = torch::full(want.sizes(), std::numeric_limits<float>::quiet_NaN(), x.options())
                      .contiguous(at::MemoryFormat::ChannelsLast);
  }
};

// A residual block's tail: relu(bn2(conv(relu(bn1(x)))) + x).
struct BlockImpl : torch::nn::Module {
  BlockImpl()
      : bn1(register_module("bn1", torch::nn::BatchNorm2d(16))),
        conv(register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(16, 16, 3).padding(1).bias(false)))),
        bn2(register_module("bn2", torch::nn::BatchNorm2d(16))) {}
  torch::Tensor forward(torch::Tensor x) {
    return torch::relu(bn2->forward(conv->forward(torch::relu(bn1->forward(x)))) + x);
  }
  torch::nn::BatchNorm2d bn1;
  torch::nn::Conv2d conv;
  torch::nn::BatchNorm2d bn2;
};
TORCH_MODULE(Block);

// Statistics a trained network would have: means around zero, variances around one.
void randomize_statistics(torch::nn::BatchNorm2d& bn) {
  torch::NoGradGuard no_grad;
  bn->running_mean.normal_(0, 0.5);
  bn->running_var.uniform_(0.5, 2.0);
  bn->weight.normal_(1, 0.2);
  bn->bias.normal_(0, 0.2);
}

// A block on the GPU in `dtype`, in eval mode, its statistics randomized from `seed`.
Block block_for_inference(std::uint64_t seed, c10::ScalarType dtype) {
  torch::manual_seed(seed);
  Block block;
  randomize_statistics(block->bn1);
  randomize_statistics(block->bn2);
  block->to(kDevice, dtype);
  block->eval();
  return block;
}

TEST(InferenceRewritesCuda, BatchNormsRunInTheKernelAfterThemAndSeeEveryParameterChange) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::NoGradGuard no_grad;
  for (auto dtype : {at::kFloat, at::kHalf}) {
    SCOPED_TRACE(c10::toString(dtype));
    auto block = block_for_inference(3, dtype);
    // Every fold kept: this block's weight is a quarter of its result, which the default
    // (CompileOptions::kept_weight_fraction, 0.1) leaves unfolded; checked at the end.
    auto every_copy = no_fallback("block");
    every_copy.kept_weight_fraction = std::numeric_limits<double>::infinity();
    auto fast = compile(block, every_copy);
    auto layout = dtype == at::kHalf ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
    // `compiled` against the block on fresh inputs, kCalls calls.
    auto check_module = [&](auto& compiled, const std::string& when, at::MemoryFormat input_layout) {
      for (int call = 0; call < kCalls; ++call) {
        auto x =
            torch::randn({4, 16, 12, 12}, torch::TensorOptions().device(kDevice).dtype(dtype)).contiguous(input_layout);
        auto got = compiled(x), want = block->forward(x);
        EXPECT_LE(relative_error(got.to(at::kFloat), want.to(at::kFloat)), tolerance(dtype)) << when << ", call " << call;
      }
    };
    auto check = [&](const std::string& when) { check_module(fast, when, layout); };
    check("as built");
    const auto report = fast.report();
    // bn1 (before the convolution) as arithmetic; bn2 folded into the convolution, which takes the
    // residual add and the ReLU along (passes/convolution_epilogue.h).
    EXPECT_EQ(pass_counter(report, "decompose_batch_norm", "decomposed"), 1) << report.to_string();
    EXPECT_EQ(pass_counter(report, "fuse_convolution_epilogue", "with_residual"), 1) << report.to_string();
    EXPECT_EQ(report.nodes_per_backend.count("torch_gpu") ? report.nodes_per_backend.at("torch_gpu") : 0, 1)
        << "only the fused convolution runs in PyTorch's kernels: " << report.to_string();
    // In place: the statistics and the affine parameters, as a calibration would update them.
    block->bn1->running_var.mul_(3);
    block->bn2->running_mean.add_(1);
    block->bn2->weight.mul_(-1);
    check("after updates in place");
    // Replaced: the buffer now lies in new memory (the C++ frontend replaces a registered tensor's
    // data, not the tensor), which the graph was not recorded with.
    const auto* old_address = block->bn2->running_var.data_ptr();
    block->bn2->running_var.set_data(block->bn2->running_var * 0.25 + 0.1);
    ASSERT_NE(block->bn2->running_var.data_ptr(), old_address);
    check("after a buffer was replaced");
    EXPECT_EQ(fast.stats().eager_calls, 0);
    EXPECT_GT(fast.stats().graph_replays, 0);

    // By default the weight is too large against its result to keep a folded copy of, and the
    // convolution would copy it channels-last at every call (its input is channels-last, its
    // weight not): bn2 is folded into that copy at every call, and the plan keeps only the
    // per-channel scale and folded bias. Each change is seen at the next call.
    const auto last = at::MemoryFormat::ChannelsLast;
    auto defaulted = compile(block, no_fallback("block-default"));
    check_module(defaulted, "with the default kept_weight_fraction", last);
    const auto each_call = defaulted.report();
    EXPECT_EQ(pass_counter(each_call, "fuse_convolution_epilogue", "folded_each_call"), 1) << each_call.to_string();
    EXPECT_EQ(pass_counter(each_call, "fuse_convolution_epilogue", "weight_too_large"), 0) << each_call.to_string();
    EXPECT_EQ(pass_counter(each_call, "decompose_batch_norm", "decomposed"), 1) << each_call.to_string();
    const auto weight_bytes = block->conv->weight.numel() * block->conv->weight.element_size();
    EXPECT_LT(defaulted.stats().kept_bytes, weight_bytes) << "a copy of the weight was kept";
    block->conv->weight.mul_(-0.5);
    check_module(defaulted, "after the weight was updated in place", last);
    block->bn2->running_var.add_(0.5);
    check_module(defaulted, "after a statistic was updated in place", last);
    block->conv->weight.set_data(torch::randn_like(block->conv->weight));
    check_module(defaulted, "after the weight was replaced", last);
    EXPECT_EQ(defaulted.stats().eager_calls, 0);
    EXPECT_GT(defaulted.stats().graph_replays, 0);
  }
}

// A channels-last 16-bit network whose weights are too large against their results to keep folded
// copies of (the block's is a quarter of its result; CompileOptions::kept_weight_fraction is 0.1):
// the batch norm before the residual add runs in cuDNN's epilogue as a per-channel scale and shift
// (plugins/torch_gpu/cudnn_scaled_convolution.h), and the plan keeps those two vectors, not a weight.
TEST(InferenceRewritesCuda, AChannelsLastBlockRunsItsBatchNormInCudnnsEpilogueWithoutAWeightCopy) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::NoGradGuard no_grad;
  for (auto dtype : {at::kHalf, at::kBFloat16}) {
    SCOPED_TRACE(c10::toString(dtype));
    auto block = block_for_inference(5, dtype);
    for (auto& parameter : block->parameters()) {
      if (parameter.dim() == 4) parameter.set_data(parameter.contiguous(at::MemoryFormat::ChannelsLast));
    }
    auto fast = compile(block, no_fallback("scaled-block"));
    const auto runs_before = ir::scaled_convolution_runner_calls();
    auto check = [&](const std::string& when) {
      for (int call = 0; call < kCalls; ++call) {
        auto x = torch::randn({4, 16, 12, 12}, torch::TensorOptions().device(kDevice).dtype(dtype))
                     .contiguous(at::MemoryFormat::ChannelsLast);
        auto got = fast(x), want = block->forward(x);
        EXPECT_LE(relative_error(got.to(at::kFloat), want.to(at::kFloat)), tolerance(dtype)) << when << ", call " << call;
      }
    };
    check("as built");
    const auto report = fast.report();
    EXPECT_EQ(pass_counter(report, "fuse_convolution_epilogue", "scaled"), 1) << report.to_string();
    EXPECT_EQ(pass_counter(report, "fuse_convolution_epilogue", "with_residual"), 1) << report.to_string();
    EXPECT_EQ(pass_counter(report, "fuse_convolution_epilogue", "weight_too_large"), 0) << report.to_string();
    // cuDNN's fused graph computed it: the first call launch by launch, the capture (replays
    // run the graph, not the op).
    EXPECT_GE(ir::scaled_convolution_runner_calls() - runs_before, 2);
    // Two float32 vectors of 16 channels and bn1's arithmetic constants, far below the weight's
    // 16 x 16 x 3 x 3 elements.
    const auto weight_bytes = block->conv->weight.numel() * block->conv->weight.element_size();
    EXPECT_LT(fast.stats().kept_bytes, weight_bytes) << "a copy of the weight was kept";
    block->bn2->running_mean.add_(1);
    block->bn2->weight.mul_(-1);
    check("after updates in place");
    block->bn2->running_var.set_data(block->bn2->running_var * 0.25 + 0.1);
    check("after a buffer was replaced");
    EXPECT_EQ(fast.stats().eager_calls, 0);
    EXPECT_GT(fast.stats().graph_replays, 0);
  }
}

// The op on every convolution shape of ResNet-50 (224 x 224) at batch 1 and 2, stride 2 and the
// 7x7 stem included, with and without a residual: its result's memory poisoned with NaN before
// each call (the caching allocator hands the freed block back), so that an output the fused graph
// leaves unwritten shows, and checked against the same arithmetic in float32 on the same inputs.
// The ResNet-50 b1 bench run of 2026-11-29 (docs/performance.md) saw results off by up to 0.2 in
// some processes and not in others, which the block test above did not.
TEST(InferenceRewritesCuda, TheCudnnScaledEpilogueWritesEveryOutputOfEveryResNetShape) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::NoGradGuard no_grad;
  {
    // The PyTorch GPU plugin, which installs the cuDNN runner, loads with a compile on CUDA.
    auto block = block_for_inference(7, at::kHalf);
    auto fast = compile(block, no_fallback("scaled-shapes-plugins"));
    fast(torch::randn({1, 16, 4, 4}, torch::TensorOptions().device(kDevice).dtype(at::kHalf)));
  }
  const std::vector<ConvShape> shapes = {
      {3, 64, 7, 2, 224},    {64, 64, 1, 1, 56},    {64, 64, 3, 1, 56},    {64, 256, 1, 1, 56},   {256, 64, 1, 1, 56},
      {256, 128, 1, 1, 56},  {128, 128, 3, 2, 56},  {128, 512, 1, 1, 28},  {512, 128, 1, 1, 28},  {128, 128, 3, 1, 28},
      {512, 256, 1, 1, 28},  {256, 256, 3, 2, 28},  {256, 1024, 1, 1, 14}, {1024, 256, 1, 1, 14}, {256, 256, 3, 1, 14},
      {1024, 512, 1, 1, 14}, {512, 512, 3, 2, 14},  {512, 2048, 1, 1, 7},  {2048, 512, 1, 1, 7},  {512, 512, 3, 1, 7}};
  torch::manual_seed(11);
  std::int64_t fused = 0, cases = 0;
  for (auto dtype : {at::kHalf, at::kBFloat16}) {
    for (std::int64_t batch : {1, 2}) {
      for (const auto& shape : shapes) {
        for (bool residual : {false, true}) {
          SCOPED_TRACE(fmt::format("{} batch {} {}->{} {}x{} stride {} at {}{}", c10::toString(dtype), batch, shape.in,
                                   shape.out, shape.kernel, shape.kernel, shape.stride, shape.side,
                                   residual ? " with a residual" : ""));
          const auto call = ScaledCall::draw(shape, batch, dtype, residual);
          call.poison_next_result();
          const auto runs = ir::scaled_convolution_runner_calls();
          auto got = call.run();
          fused += ir::scaled_convolution_runner_calls() > runs;
          ++cases;
          ASSERT_EQ(got.sizes(), call.want.sizes());
          EXPECT_FALSE(got.isnan().any().item<bool>()) << "outputs left unwritten";
          EXPECT_LE(relative_error(got.to(at::kFloat), call.want), tolerance(dtype));
        }
      }
    }
  }
  std::cout << "cuDNN's fused graph computed " << fused << " of " << cases << " calls\n";
  EXPECT_GT(fused, 0) << "the runner took no call";

  // Every batch-1 shape with a residual, float16, twice over different tensors, now that every plan
  // is built (a plan whose execution depends on which plan was built last shows here), then
  // recorded in one CUDA graph and replayed over outputs poisoned again (a plan that keeps the
  // pointers of its last execution would hand the first of the two the second's): both against
  // float32 arithmetic.
  struct Call {
    ScaledCall call;
    at::Tensor direct, replayed;
  };
  std::vector<Call> calls;
  auto called = shapes;
  called.insert(called.end(), shapes.begin(), shapes.end());
  for (const auto& shape : called) {
    Call c{ScaledCall::draw(shape, 1, at::kHalf, /*residual=*/true), {}, {}};
    c.call.poison_next_result();
    c.direct = c.call.run();
    calls.push_back(std::move(c));
  }
  auto stream = c10::cuda::getStreamFromPool(false, kDevice.index());
  torch::cuda::synchronize();  // the inputs made on the current stream are ready for the capture's
  at::cuda::CUDAGraph graph;
  {
    c10::cuda::CUDAStreamGuard on(stream);
    graph.capture_begin();
    for (auto& c : calls) c.replayed = c.call.run();
    graph.capture_end();
  }
  for (auto& c : calls) c.replayed.fill_(std::numeric_limits<float>::quiet_NaN());
  graph.replay();
  torch::cuda::synchronize();
  for (std::size_t k = 0; k < calls.size(); ++k) {
    SCOPED_TRACE(fmt::format("every plan built, call {}: {}->{} {}x{} stride {} at {}", k, called[k].in,
                             called[k].out, called[k].kernel, called[k].kernel, called[k].stride, called[k].side));
    for (const auto* got : {&calls[k].direct, &calls[k].replayed}) {
      const char* how = got == &calls[k].direct ? "called" : "replayed in one graph";
      EXPECT_FALSE(got->isnan().any().item<bool>()) << how << ": outputs left unwritten";
      EXPECT_LE(relative_error(got->to(at::kFloat), calls[k].call.want), tolerance(at::kHalf)) << how;
    }
  }
}

// cuDNN launches its fused kernel as a programmatic dependent, which may start before the kernel
// before it has finished and reads some operands before it waits (full_dependency.h): in a CUDA
// graph no edge into it may be programmatic. Here the kernels right before it write its input and
// its residual, and the graph is replayed over fresh values of both.
TEST(InferenceRewritesCuda, TheCudnnFusedKernelStartsOnlyAfterTheKernelsBeforeItHaveFinished) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::NoGradGuard no_grad;
  {
    auto block = block_for_inference(7, at::kHalf);
    auto fast = compile(block, no_fallback("full-dependency-plugins"));
    fast(torch::randn({1, 16, 4, 4}, torch::TensorOptions().device(kDevice).dtype(at::kHalf)));
  }
  const auto options = torch::TensorOptions().device(kDevice).dtype(at::kHalf);
  torch::manual_seed(13);
  const std::int64_t in = 64, out = 256, side = 56;
  auto a = torch::randn({1, in, side, side}, options).contiguous(at::MemoryFormat::ChannelsLast);
  auto b = torch::randn({1, out, side, side}, options).contiguous(at::MemoryFormat::ChannelsLast);
  auto w = (torch::randn({out, in, 1, 1}, options.dtype(at::kFloat)) / std::sqrt(static_cast<double>(in)))
               .to(at::kHalf)
               .contiguous(at::MemoryFormat::ChannelsLast);
  auto scale = torch::rand({out}, options.dtype(at::kFloat)) + 0.5;
  auto shift = torch::randn({out}, options.dtype(at::kFloat)) * 0.1;
  auto run = [&] {
    // Written by the kernels just before the fused one.
    auto x = a * 2;
    auto z = b + 1;
    return scaled_convolution(x, w, scale, shift, z, 1, 0);
  };
  const auto calls = ir::scaled_convolution_runner_calls();
  run();  // builds and checks the plan outside the capture
  ASSERT_GT(ir::scaled_convolution_runner_calls(), calls) << "the runner took no call";
  auto stream = c10::cuda::getStreamFromPool(false, kDevice.index());
  torch::cuda::synchronize();
  at::cuda::CUDAGraph graph(/*keep_graph=*/true);
  at::Tensor replayed;
  {
    c10::cuda::CUDAStreamGuard on(stream);
    graph.capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
    replayed = run();
    graph.capture_end();
  }
  std::size_t count = 0;
  ASSERT_EQ(cudaGraphGetEdges(graph.raw_cuda_graph(), nullptr, nullptr, nullptr, &count), cudaSuccess);
  std::vector<cudaGraphNode_t> from(count), to(count);
  std::vector<cudaGraphEdgeData> edges(count);
  ASSERT_EQ(cudaGraphGetEdges(graph.raw_cuda_graph(), from.data(), to.data(), edges.data(), &count), cudaSuccess);
  ASSERT_GE(count, 2u) << "the two kernels before the fused one and the fused one should be joined";
  for (const auto& edge : edges) {
    EXPECT_EQ(edge.type, cudaGraphDependencyTypeDefault)
        << "a programmatic edge: a kernel may start before the one it reads has finished";
  }
  graph.instantiate();
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE(fmt::format("replay {}", round));
    a.copy_(torch::randn_like(a));
    b.copy_(torch::randn_like(b));
    replayed.fill_(std::numeric_limits<float>::quiet_NaN());
    graph.replay();
    auto want = torch::relu(torch::conv2d(a.to(at::kFloat) * 2, w.to(at::kFloat)) * scale.view({1, -1, 1, 1}) +
                            shift.view({1, -1, 1, 1}) + (b.to(at::kFloat) + 1));
    EXPECT_FALSE(replayed.isnan().any().item<bool>()) << "outputs left unwritten";
    EXPECT_LE(relative_error(replayed.to(at::kFloat), want), tolerance(at::kHalf));
  }
}

// A small classifier as torchvision writes one: a stem, a residual block, global pooling, a linear
// head. Its result has two dimensions, so the convolutions may run channels-last.
struct ClassifierImpl : torch::nn::Module {
  ClassifierImpl()
      : stem(register_module("stem", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 16, 3).padding(1).bias(false)))),
        bn(register_module("bn", torch::nn::BatchNorm2d(16))),
        block(register_module("block", Block())),
        head(register_module("head", torch::nn::Linear(16, 10))) {}
  torch::Tensor forward(torch::Tensor x) {
    auto features = block->forward(torch::relu(bn->forward(stem->forward(x))));
    return head->forward(torch::adaptive_avg_pool2d(features, {1, 1}).flatten(1));
  }
  torch::nn::Conv2d stem;
  torch::nn::BatchNorm2d bn;
  Block block;
  torch::nn::Linear head;
};
TORCH_MODULE(Classifier);

// The channels-last copies the optimized graph makes, from the call's trace dump.
std::int64_t channels_last_copies(const CompileReport& report) {
  const auto dump = dump_from_json(read_json_file(report.dump_path));
  std::int64_t copies = 0;
  for (const auto& node : dump.optimized.nodes) {
    const auto* format = node.arg("memory_format");
    const auto* value = format ? std::get_if<std::int64_t>(&format->value) : nullptr;
    copies += node.op == "aten::contiguous" && value && *value == static_cast<std::int64_t>(at::MemoryFormat::ChannelsLast);
  }
  return copies;
}

TEST(InferenceRewritesCuda, AnNchwNetworkRunsChannelsLastOverKeptWeightCopies) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::NoGradGuard no_grad;
  // cuDNN's NHWC and NCHW kernels round TF32 products differently; off, both are float32 sums.
  const bool tf32 = at::globalContext().allowTF32CuDNN();
  at::globalContext().setAllowTF32CuDNN(false);
  const auto folder = std::filesystem::temp_directory_path() / "zenith-channels-last-inference";
  for (auto dtype : {at::kFloat, at::kHalf}) {
    SCOPED_TRACE(c10::toString(dtype));
    torch::manual_seed(5);
    Classifier net;
    randomize_statistics(net->bn);
    randomize_statistics(net->block->bn1);
    randomize_statistics(net->block->bn2);
    net->to(kDevice, dtype);
    net->eval();
    auto options = no_fallback("classifier");
    options.dump_dir = folder.string();
    // Every weight's copy kept (the block's weight is 14% of its result, more than the default
    // kept_weight_fraction keeps a copy of).
    options.kept_weight_fraction = std::numeric_limits<double>::infinity();
    auto fast = compile(net, options);
    auto check = [&](const std::string& when) {
      for (int call = 0; call < kCalls; ++call) {
        auto x = torch::randn({4, 3, 16, 16}, torch::TensorOptions().device(kDevice).dtype(dtype));
        auto got = fast(x), want = net->forward(x);
        EXPECT_LE(relative_error(got.to(at::kFloat), want.to(at::kFloat)), tolerance(dtype)) << when << ", call " << call;
      }
    };
    check("as built");
    // The call's tensor once, and each convolution's weight.
    EXPECT_EQ(channels_last_copies(fast.report()), 3) << fast.report().to_string();
    EXPECT_EQ(fast.stats().derived_computations, 1) << "the weight copies are made once";
    net->stem->weight.mul_(-0.5);
    check("after a weight was updated in place");
    EXPECT_EQ(fast.stats().derived_computations, 2);
    net->block->conv->weight.set_data(torch::randn_like(net->block->conv->weight) * 0.1);
    check("after a weight was replaced");
    EXPECT_EQ(fast.stats().derived_computations, 3);
    EXPECT_EQ(fast.stats().eager_calls, 0);
    EXPECT_GT(fast.stats().graph_replays, 0);

    auto off = no_fallback("classifier-nchw");
    off.channels_last = false;
    off.dump_dir = folder.string();
    auto nchw = compile(net, off);
    auto x = torch::randn({4, 3, 16, 16}, torch::TensorOptions().device(kDevice).dtype(dtype));
    EXPECT_LE(relative_error(nchw(x).to(at::kFloat), net->forward(x).to(at::kFloat)), tolerance(dtype));
    EXPECT_EQ(channels_last_copies(nchw.report()), 0) << "off by option";
  }
  testing::remove_folder(folder);
  at::globalContext().setAllowTF32CuDNN(tf32);
}

// BERT's self-attention, written out as models do: heads split by view and transpose, scores
// scaled, an additive padding mask, softmax, the product with v, heads merged.
struct SelfAttentionImpl : torch::nn::Module {
  static constexpr std::int64_t kHeads = 4, kHeadDim = 16, kHidden = kHeads * kHeadDim;
  SelfAttentionImpl()
      : q(register_module("q", torch::nn::Linear(kHidden, kHidden))),
        k(register_module("k", torch::nn::Linear(kHidden, kHidden))),
        v(register_module("v", torch::nn::Linear(kHidden, kHidden))) {}
  torch::Tensor forward(torch::Tensor x, torch::Tensor mask) {
    const auto batch = x.size(0), tokens = x.size(1);
    auto heads = [&](const torch::Tensor& t) { return t.view({batch, tokens, kHeads, kHeadDim}).transpose(1, 2); };
    auto scores = torch::matmul(heads(q->forward(x)), heads(k->forward(x)).transpose(-2, -1)) / std::sqrt(double(kHeadDim));
    auto probabilities = torch::softmax(scores + mask, -1);
    auto context = torch::matmul(probabilities, heads(v->forward(x)));
    return context.transpose(1, 2).reshape({batch, tokens, kHidden});
  }
  torch::nn::Linear q, k, v;
};
TORCH_MODULE(SelfAttention);

TEST(InferenceRewritesCuda, HandWrittenAttentionWithAPaddingMaskMatchesEager) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::NoGradGuard no_grad;
  for (auto dtype : {at::kFloat, at::kHalf, at::kBFloat16}) {
    SCOPED_TRACE(c10::toString(dtype));
    torch::manual_seed(8);
    SelfAttention attention;
    attention->to(kDevice, dtype);
    attention->eval();
    auto fast = compile(attention, no_fallback("attention"));
    const auto options = torch::TensorOptions().device(kDevice).dtype(dtype);
    auto check = [&](const std::string& when) {
      for (int call = 0; call < kCalls; ++call) {
        auto x = torch::randn({2, 24, SelfAttentionImpl::kHidden}, options);
        // Padding: the last tokens of each sequence masked out by the dtype's lowest, as models
        // mask, a different count each call; from the second call on, the second sequence is
        // padding throughout (its every query blind: eager weighs its keys evenly).
        auto mask = torch::zeros({2, 1, 1, 24}, options);
        const double lowest = testing::lowest_finite(dtype);
        mask.index_put_({torch::indexing::Slice(), 0, 0, torch::indexing::Slice(24 - 3 - call, 24)}, lowest);
        if (call > 0) mask[1].fill_(lowest);
        auto got = fast(x, mask), want = attention->forward(x, mask);
        EXPECT_LE(relative_error(got.to(at::kFloat), want.to(at::kFloat)), tolerance(dtype)) << when << ", call " << call;
      }
    };
    check("as built");
    const auto report = fast.report();
    // The padding mask is data: the fused node is followed by attention_blind_rows, which
    // computes a query whose every key is masked as written (passes/attention_fusion.h: there
    // eager's softmax and the fused kernels differ).
    EXPECT_EQ(pass_counter(report, "fuse_attention", "fused"), 1) << report.to_string();
    EXPECT_EQ(pass_counter(report, "fuse_attention", "blind_rows_checked"), 1) << report.to_string();
    // q, k and v as one product over their weights and biases concatenated, made once.
    EXPECT_EQ(pass_counter(report, "concatenate_sibling_products", "concatenated"), 3) << report.to_string();
    EXPECT_EQ(fast.stats().derived_computations, 1);
    // The weights moved into their concatenation (runtime/parameter_packing.h), one after another;
    // the biases too where each starts 256-byte aligned (64 float32 values; not 64 of 2 bytes).
    EXPECT_EQ(fast.stats().packed_parameters, dtype == at::kFloat ? 6 : 3);
    std::vector<const char*> starts;  // in the order the rewrite concatenated them, which may not be q, k, v
    for (const auto& w : {attention->q->weight, attention->k->weight, attention->v->weight}) {
      starts.push_back(static_cast<const char*>(w.data_ptr()));
    }
    std::sort(starts.begin(), starts.end());
    const auto bytes = static_cast<std::ptrdiff_t>(attention->q->weight.nbytes());
    EXPECT_EQ(starts[1] - starts[0], bytes);
    EXPECT_EQ(starts[2] - starts[1], bytes);
    attention->k->weight.mul_(-0.5);
    check("after an update in place");
    EXPECT_EQ(fast.stats().derived_computations, 2);
    // The trace adds a 3-d input's bias after the product (matmul, then add): the adds go with
    // the products, one add of the biases concatenated, so a bias updated in place is a derived
    // value computed again, as a weight is.
    attention->v->bias.add_(0.25);
    check("after a bias update in place");
    EXPECT_EQ(fast.stats().derived_computations, 3) << "after a bias update in place";
    attention->q->weight.set_data(torch::randn_like(attention->q->weight) * 0.2);
    check("after a weight was replaced");
    EXPECT_EQ(fast.stats().derived_computations, 4) << "after a weight was replaced";
    EXPECT_EQ(fast.stats().eager_calls, 0);
    EXPECT_GT(fast.stats().graph_replays, 0);
  }
}

// Three projections of one input with weights of 64 MB each: their concatenation (192 MB) is a
// block of the caching allocator larger than each weight's, so the weights' old memory, freed when
// they move into it, fits no later block. Packing hands it back to the device: the memory reserved
// after the first calls grows by what the calls use, not by the block as well.
struct WideProjectionsImpl : torch::nn::Module {
  static constexpr std::int64_t kWidth = 4096;
  WideProjectionsImpl()
      : q(register_module("q", torch::nn::Linear(torch::nn::LinearOptions(kWidth, kWidth).bias(false)))),
        k(register_module("k", torch::nn::Linear(torch::nn::LinearOptions(kWidth, kWidth).bias(false)))),
        v(register_module("v", torch::nn::Linear(torch::nn::LinearOptions(kWidth, kWidth).bias(false)))) {}
  torch::Tensor forward(const torch::Tensor& x) { return q->forward(x) + k->forward(x) * v->forward(x); }
  torch::nn::Linear q, k, v;
};
TORCH_MODULE(WideProjections);

// The model on the device for inference, its weights drawn after seeding with `seed`.
WideProjections wide_projections(std::uint64_t seed) {
  torch::manual_seed(seed);
  WideProjections model;
  model->to(kDevice);
  model->eval();
  return model;
}

TEST(InferenceRewritesCuda, PackedWeightsOldMemoryGoesBackToTheDevice) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::NoGradGuard no_grad;
  auto model = wide_projections(10);
  const auto weight_bytes = static_cast<std::int64_t>(model->q->weight.nbytes());
  c10::cuda::CUDACachingAllocator::emptyCache();
  const auto before = reserved_bytes();
  auto fast = compile(model, no_fallback("wide projections"));
  for (int call = 0; call < kCalls; ++call) {
    auto x = torch::randn({4, WideProjectionsImpl::kWidth}, kDevice);
    // 1e-4 of the largest value: one product over the concatenation against three; cuBLAS may
    // pick other algorithms (another summation order) for the wider product.
    EXPECT_LE(relative_error(fast(x), model->forward(x)), tolerance(at::kFloat)) << "call " << call;
  }
  ASSERT_EQ(fast.stats().packed_parameters, 3);
  ASSERT_EQ(fast.stats().packed_bytes, 3 * weight_bytes);
  EXPECT_EQ(fast.stats().kept_bytes, 0) << "the kept concatenation is a view of the packed weights";
  // The block takes the place of the weights' old memory, which goes back to the device: what
  // stays reserved beyond it is what the calls use (the graph pool's segments, workspaces,
  // activations of 4 rows), 38 MB on an H200. Kept, the old memory would add the block's 192 MB
  // (230 MB there with the hand-back taken out): half a block separates the two.
  const auto grown = reserved_bytes() - before;
  EXPECT_LT(grown, 3 * weight_bytes / 2) << "reserved grew by " << grown << " bytes for a block of "
                                         << 3 * weight_bytes;
}

// Packing moves the weights out to the host before it allocates their block, so the first call
// never holds them twice: made beside the old weights, the block (192 MB here) came on top of them.
TEST(InferenceRewritesCuda, PackingHoldsTheWeightsOnce) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::NoGradGuard no_grad;
  auto model = wide_projections(11);
  const auto weight_bytes = static_cast<std::int64_t>(model->q->weight.nbytes());
  auto fast = compile(model, no_fallback("wide projections"));
  auto x = torch::randn({4, WideProjectionsImpl::kWidth}, kDevice);
  const auto expected = model->forward(x);
  const auto before = allocated_bytes();
  reset_peaks();
  const auto first = fast(x);
  const auto peak = allocated_peak_bytes() - before;
  ASSERT_EQ(fast.stats().packed_parameters, 3);
  // The first call's own tensors (activations of 4 rows, workspaces) are a few MB; the weights
  // held twice would add 192 MB. Half the block separates the two.
  EXPECT_LT(peak, 3 * weight_bytes / 2) << "the first call peaked " << peak << " bytes above its start";
  std::cout << "the first call, packing a block of " << 3 * weight_bytes << " bytes, peaked " << peak
            << " bytes above its start\n";
  // 1e-4 of the largest value, as above: the values moved through the host unchanged.
  EXPECT_LE(relative_error(first, expected), tolerance(at::kFloat));
  for (int call = 1; call < kCalls; ++call) {
    auto fresh = torch::randn({4, WideProjectionsImpl::kWidth}, kDevice);
    EXPECT_LE(relative_error(fast(fresh), model->forward(fresh)), tolerance(at::kFloat)) << "call " << call;
  }
}

// A number made on the CPU from a size, as traces make them (DeBERTa divides its scores by the
// square root of its head size): folded to a 0-d CPU constant, read by the CUDA division as a copy
// on the device, so nothing breaks the plan; a new size is a new signature with its own number.
TEST(InferenceRewritesCuda, ANumberMadeFromASizeOnTheCpuStaysInThePlan) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::NoGradGuard no_grad;
  auto fn = [](at::Tensor x) {
    auto scale = at::scalar_tensor(static_cast<double>(x.size(-1))).sqrt();
    return at::relu(x) / scale.to(x.scalar_type());
  };
  auto fast = compile(fn, no_fallback("a number from a size"));
  torch::manual_seed(9);
  for (std::int64_t width : {64, 16}) {
    for (int call = 0; call < kCalls; ++call) {
      auto x = torch::randn({4, width}, torch::TensorOptions().device(kDevice));
      // 1e-6: one division either way; ATen's kernel and the generated one may round alike or a
      // unit apart.
      EXPECT_LE(relative_error(fast(x), fn(x)), 1e-6) << "width " << width << ", call " << call;
    }
    const auto report = fast.report();
    EXPECT_TRUE(report.graph_breaks.empty()) << report.to_string();
    EXPECT_EQ(pass_counter(report, "scalar_constants_on_device", "moved"), 1) << report.to_string();
  }
}

}  // namespace
}  // namespace zenith
