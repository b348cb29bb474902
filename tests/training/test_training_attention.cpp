// Training through compiled modules under bfloat16 autocast (the forward in the region, the
// backward outside it, as autocast's documentation asks) and through attention (written out as
// BERT writes it, or calling scaled_dot_product_attention with dropout), against eager autograd
// step by step on fresh inputs. The rest: test_training.cpp.
#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <tuple>

#include <unistd.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ATen/SDPBackend.h>

#include "core/dump.h"
#include "training/training_checks.h"

namespace {

using namespace zenith::testing::training;
using zenith::testing::expect_close;

TEST_F(TrainingTest, AutocastRegionsCompileWithEagerAutocastsGradients) {
  models::MlpConfig config;
  config.in = 16;
  config.hidden = {32};
  config.out = 8;
  auto [eager, twin] = twins<models::Mlp>(config);
  auto compiled = zenith::compile(twin, strict("autocast"));
  for (int step = 0; step < 3; ++step) {
    eager->zero_grad();
    twin->zero_grad();
    // Three dimensions: LibTorch's linear adds its float32 bias in place into the bfloat16 product
    // (capture/promoting_writes.h).
    auto x = on_device(torch::randn({2, 5, 16}));
    torch::Tensor want, got;
    {
      AutocastRegion region;
      want = eager->forward(x).to(torch::kFloat).pow(2).mean();
      got = compiled(x).to(torch::kFloat).pow(2).mean();
    }
    want.backward();
    got.backward();
    // The same casts and kernels; a fused group may round an intermediate once where eager rounds
    // twice: a few bfloat16 units in the last place (2^-8 relative).
    expect_close(got.detach(), want.detach(), 2e-2, 1e-3, "autocast loss, step " + std::to_string(step));
    for (const auto& item : eager->named_parameters()) {
      expect_close(twin->named_parameters()[item.key()].grad(), item.value().grad(), 2e-2, 1e-3,
                   "autocast gradient of " + item.key() + ", step " + std::to_string(step));
    }
  }
  EXPECT_EQ(compiled.stats().eager_calls, 0);
  EXPECT_EQ(compiled.stats().misses, 1);
  EXPECT_EQ(compiled.stats().training_calls, 2) << "the first call is the capture";
}

// Batch norm and the loss inside the compiled call, in the region: on CUDA, batch norm's bfloat16
// input runs ATen's native kernels (cuDNN's need its weight bfloat16 too), and cross_entropy_loss,
// which CUDA autocast does not list, casts inside (its nll_loss does): the capture writes that cast
// into the graph (capture/autocast_inner_casts.h). On the CPU, autocast casts the logits before it.
TEST_F(TrainingTest, AutocastCnnWithBatchNormAndItsLossCompiles) {
  auto [eager, twin] = twins<CnnLoss>(models::CnnConfig::small());
  eager->train();
  twin->train();
  check_steps(
      eager, twin, "autocast cnn", 3,
      [] { return std::make_tuple(on_device(torch::randn({4, 3, 32, 32})), on_device(torch::randint(10, {4}))); }, "",
      StepPrecision::BFloat16Autocast);
}

// Attention, layer norm (autocast keeps it float32), GELU and dropout in the region.
TEST_F(TrainingTest, AutocastBertWithDropoutCompiles) {
  auto config = models::BertConfig::small();
  auto [eager, twin] = twins<BertLoss>(config);
  eager->train();
  twin->train();
  auto mask = on_device(torch::ones({2, 8}, torch::kLong));
  check_steps(
      eager, twin, "autocast bert", 3,
      [&] { return std::make_tuple(on_device(torch::randint(config.vocab_size, {2, 8})), mask); }, "",
      StepPrecision::BFloat16Autocast);
}

// RMSNorm, rotary embeddings, SwiGLU and the cross entropy over the vocabulary in the region.
TEST_F(TrainingTest, AutocastLlamaWithCrossEntropyCompiles) {
  auto config = models::LlamaConfig::small();
  auto [eager, twin] = twins<LlamaLoss>(config);
  check_steps(
      eager, twin, "autocast llama", 3,
      [&] {
        return std::make_tuple(on_device(torch::randint(config.vocab_size, {2, 8})),
                               on_device(torch::randint(config.vocab_size, {2, 8})));
      },
      "", StepPrecision::BFloat16Autocast);
}

int count_ops(const zenith::ir::Graph& graph, const std::string& op) {
  return static_cast<int>(std::count_if(graph.nodes.begin(), graph.nodes.end(),
                                        [&](const zenith::ir::Node& node) { return node.op == op; }));
}

// The fused attention kernels' ops, forward and backward: none may run attention whose mask is data.
int fused_attention_ops(const zenith::ir::Graph& graph) {
  int count = 0;
  for (const char* kernel : {"flash", "efficient", "cudnn"}) {
    const std::string op = std::string("aten::_scaled_dot_product_") + kernel + "_attention";
    count += count_ops(graph, op) + count_ops(graph, op + "_backward");
  }
  return count;
}

// Attention as BERT writes it, without dropout, its additive padding mask made from the mask
// input (data): in training it stays as written on every device, one softmax per layer, because
// for a query whose every key is masked eager's written-out softmax and the fused kernels differ
// (passes/attention_fusion.h; inference plans compute such rows again, training has no
// derivative rule for that). Padded positions masked, gradients against eager's step by step.
TEST_F(TrainingTest, AttentionWithADataMaskTrainsAsWritten) {
  namespace fs = std::filesystem;
  auto config = models::BertConfig::small();
  config.dropout = 0;
  auto [eager, twin] = twins<BertLoss>(config);
  eager->train();
  twin->train();
  auto folder = fs::temp_directory_path() / ("zenith-test-attention-dump-" + std::to_string(::getpid()));
  auto options = strict("attention");
  options.dump_dir = folder.string();
  auto compiled = zenith::compile(twin, options);
  auto mask = torch::ones({2, 8}, torch::kLong);
  mask.index_put_({1, torch::indexing::Slice(5, torch::indexing::None)}, 0);
  mask = on_device(mask);
  for (int step = 0; step < 3; ++step) {
    eager->zero_grad();
    twin->zero_grad();
    auto ids = on_device(torch::randint(config.vocab_size, {2, 8}));
    auto want = eager->forward(ids, mask);
    auto got = compiled(ids, mask);
    want.backward();
    got.backward();
    expect_close(got.detach(), want.detach(), kRtol, kAtol, "attention: loss");
    expect_same_gradients(*eager, *twin, "attention step " + std::to_string(step));
  }
  EXPECT_EQ(compiled.stats().eager_calls, 0) << compiled.report().fallback_reason;
  const auto report = compiled.report();
  ASSERT_FALSE(report.dump_path.empty());
  auto dump = zenith::dump_from_json(zenith::read_json_file(report.dump_path));
  EXPECT_EQ(fused_attention_ops(dump.optimized) + fused_attention_ops(dump.backward), 0);
  EXPECT_EQ(count_ops(dump.optimized, "aten::softmax"), config.num_layers);
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(folder, ec)) fs::remove(entry.path(), ec);
  fs::remove(folder, ec);
}

// The name of the op of the fused kernel ATen chooses for these operands, or "" for its math.
std::string fused_attention_op(const torch::Tensor& q, const std::optional<torch::Tensor>& mask, double dropout,
                               bool causal) {
  const std::map<std::int64_t, std::string> kernel_ops = {
      {static_cast<std::int64_t>(at::SDPBackend::flash_attention), "aten::_scaled_dot_product_flash_attention"},
      {static_cast<std::int64_t>(at::SDPBackend::efficient_attention), "aten::_scaled_dot_product_efficient_attention"},
      {static_cast<std::int64_t>(at::SDPBackend::cudnn_attention), "aten::_scaled_dot_product_cudnn_attention"}};
  const auto choice = at::_fused_sdp_choice(q, q, q, mask, dropout, causal);
  return kernel_ops.count(choice) ? kernel_ops.at(choice) : "";
}

// The same under bfloat16 autocast, where the zoo BERT's float32 mask (it follows the float32
// embeddings) promotes the bfloat16 scores to float32 and autocast's softmax computes in float32:
// as written too, its mask being data.
TEST_F(TrainingTest, AutocastAttentionWithADataMaskCompilesAsWritten) {
  namespace fs = std::filesystem;
  auto config = models::BertConfig::small();
  config.dropout = 0;
  auto [eager, twin] = twins<BertLoss>(config);
  eager->train();
  twin->train();
  auto mask = torch::ones({2, 8}, torch::kLong);
  mask.index_put_({1, torch::indexing::Slice(5, torch::indexing::None)}, 0);
  mask = on_device(mask);
  auto folder = fs::temp_directory_path() / ("zenith-test-autocast-attention-" + std::to_string(::getpid()));
  const auto report = check_steps(
      eager, twin, "autocast attention", 3,
      [&] { return std::make_tuple(on_device(torch::randint(config.vocab_size, {2, 8})), mask); }, folder.string(),
      StepPrecision::BFloat16Autocast);
  ASSERT_FALSE(report.dump_path.empty());
  auto dump = zenith::dump_from_json(zenith::read_json_file(report.dump_path));
  EXPECT_EQ(fused_attention_ops(dump.optimized) + fused_attention_ops(dump.backward), 0);
  EXPECT_EQ(count_ops(dump.optimized, "aten::softmax"), config.num_layers);
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(folder, ec)) fs::remove(entry.path(), ec);
  fs::remove(folder, ec);
}

// Self-attention as models that call scaled_dot_product_attention write it (Hugging Face's "sdpa"
// attention), with dropout on the probabilities in training: projections, heads split by view and
// permute, an additive padding mask or a causal one, the loss a projection of the output.
struct SdpaBlockImpl : torch::nn::Module {
  SdpaBlockImpl(std::int64_t hidden, std::int64_t heads, bool masked, bool causal)
      : heads(heads), masked(masked), causal(causal),
        qkv(register_module("qkv", torch::nn::Linear(hidden, 3 * hidden))),
        out(register_module("out", torch::nn::Linear(hidden, hidden))),
        direction(register_buffer("direction", torch::randn({hidden}))) {}
  torch::Tensor forward(torch::Tensor x, torch::Tensor bias) {
    const auto batch = x.size(0), length = x.size(1), hidden = x.size(2);
    auto parts = qkv->forward(x).view({batch, length, 3, heads, hidden / heads}).permute({2, 0, 3, 1, 4});
    auto mask = masked ? std::optional<torch::Tensor>(bias.to(parts.scalar_type())) : std::nullopt;
    const double dropout = is_training() ? kDropout : 0.0;
    auto attended = at::scaled_dot_product_attention(parts[0], parts[1], parts[2], mask, dropout, causal);
    auto y = out->forward(attended.transpose(1, 2).reshape({batch, length, hidden}));
    return (y.to(torch::kFloat) * direction).mean();
  }
  // Half the probabilities dropped: a draw other than eager's changes a gradient by about half its
  // largest element (at 0.1, by about a seventh: within check_steps's autocast tolerance).
  static constexpr double kDropout = 0.5;
  std::int64_t heads;
  bool masked, causal;
  torch::nn::Linear qkv, out;
  torch::Tensor direction;
};
TORCH_MODULE(SdpaBlock);

// ATen's global choice of attention kernels, set for one test and restored.
class SdpKernels {
 public:
  SdpKernels(bool cudnn, bool flash)
      : cudnn_(at::globalContext().userEnabledCuDNNSDP()), flash_(at::globalContext().userEnabledFlashSDP()) {
    at::globalContext().setSDPUseCuDNN(cudnn);
    at::globalContext().setSDPUseFlash(flash);
  }
  ~SdpKernels() {
    at::globalContext().setSDPUseCuDNN(cudnn_);
    at::globalContext().setSDPUseFlash(flash_);
  }
  SdpKernels(const SdpKernels&) = delete;
  SdpKernels& operator=(const SdpKernels&) = delete;

 private:
  bool cudnn_, flash_;
};

struct SdpaCase {
  const char* name;
  bool autocast, masked, causal, cudnn, flash;
};

// With dropout inside scaled_dot_product_attention, the random numbers are those of the fused
// kernel eager runs: on CUDA the compiled step runs that kernel (asked of ATen as eager asks) with
// eager's arguments, so with one seed the dropout masks are eager's, step after step, CUDA graphs
// replaying. A mask drawn otherwise would change the loss and every gradient by about their size.
// The cases reach each kernel on the H100 by switching the others off, as a user can. On the CPU,
// where ATen runs its math with at::dropout, the rule refuses and the call runs eagerly, equal to
// eager's with one seed.
TEST_F(TrainingTest, AttentionWithDropoutDrawsEagersRandomNumbers) {
  const SdpaCase cases[] = {
      {"float32, padding mask", false, true, false, true, true},
      {"bfloat16, padding mask", true, true, false, true, true},
      {"bfloat16, causal", true, false, true, true, true},
      {"bfloat16, causal, cuDNN off", true, false, true, false, true},
      {"bfloat16, padding mask, cuDNN and flash off", true, true, false, false, false},
  };
  constexpr std::int64_t kBatch = 2, kLength = 16, kHidden = 64, kHeads = 2;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    SdpKernels kernels(c.cudnn, c.flash);
    std::string expected_op;
    if (kDevice.is_cuda()) {
      const auto dtype = c.autocast ? torch::kBFloat16 : torch::kFloat;
      auto q = torch::randn({kBatch, kHeads, kLength, kHidden / kHeads}, torch::dtype(dtype).device(kDevice));
      auto bias = c.masked ? std::optional<torch::Tensor>(torch::zeros({kBatch, 1, 1, kLength}, q.options()))
                           : std::nullopt;
      expected_op = fused_attention_op(q, bias, SdpaBlockImpl::kDropout, c.causal);
      if (expected_op.empty()) {
        ADD_FAILURE() << "ATen runs its math here: the case tests no fused kernel";
        continue;
      }
    }
    torch::manual_seed(7);
    SdpaBlock eager(kHidden, kHeads, c.masked, c.causal);
    torch::manual_seed(7);
    SdpaBlock twin(kHidden, kHeads, c.masked, c.causal);
    eager->to(kDevice);
    twin->to(kDevice);
    auto draw = [&] {
      auto bias = torch::zeros({kBatch, 1, 1, kLength});
      bias.index_put_({1, 0, 0, torch::indexing::Slice(10, torch::indexing::None)}, -1e4);  // padding
      return std::make_tuple(on_device(torch::randn({kBatch, kLength, kHidden})), on_device(bias));
    };
    if (!kDevice.is_cuda()) {
      zenith::CompileOptions options;
      options.name = "sdpa dropout";
      auto compiled = zenith::compile(twin, options);
      for (int step = 0; step < 3; ++step) {
        auto [x, bias] = draw();
        torch::manual_seed(100 + step);
        auto want = eager->forward(x, bias);
        torch::manual_seed(100 + step);
        auto got = compiled(x, bias);
        expect_close(got.detach(), want.detach(), 1e-6, 1e-7, "eager fallback");
      }
      EXPECT_TRUE(compiled.report().eager_fallback);
      const auto reason = compiled.report().fallback_reason;
      EXPECT_NE(reason.find("dropout_p"), std::string::npos) << reason;
      continue;
    }
    {
      // The comparison can fail: two of eager's own draws give gradients further apart than the
      // tolerances of check_steps in either precision.
      // Named, not a structured binding: C++17 lambdas cannot capture one (Clang refuses).
      const auto drawn = draw();
      const auto& x = std::get<0>(drawn);
      const auto& bias = std::get<1>(drawn);
      auto gradient_with_seed = [&](int seed) {
        eager->zero_grad();
        torch::manual_seed(seed);
        std::optional<AutocastRegion> region;
        if (c.autocast) region.emplace();
        auto loss = eager->forward(x, bias);
        region.reset();
        loss.backward();
        return eager->qkv->weight.grad().clone();
      };
      auto first = gradient_with_seed(1), second = gradient_with_seed(2);
      EXPECT_GT((first - second).abs().max().item<double>(), 0.15 * first.abs().max().item<double>());
    }
    namespace fs = std::filesystem;
    auto folder = fs::temp_directory_path() / ("zenith-test-sdpa-dump-" + std::to_string(::getpid()));
    constexpr int kSteps = 4;  // the capture, then compiled steps, recorded and replayed as CUDA graphs
    const auto report = check_steps(eager, twin, c.name, kSteps, draw, folder.string(),
                                    c.autocast ? StepPrecision::BFloat16Autocast : StepPrecision::Float32);
    ASSERT_FALSE(report.dump_path.empty());
    auto dump = zenith::dump_from_json(zenith::read_json_file(report.dump_path));
    EXPECT_EQ(count_ops(dump.optimized, expected_op), 1);
    EXPECT_EQ(count_ops(dump.backward, expected_op + "_backward"), 1);
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(folder, ec)) fs::remove(entry.path(), ec);
    fs::remove(folder, ec);
  }
}

}  // namespace
