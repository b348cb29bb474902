// Eager-mode checks of the model zoo: small configs, CPU, float32. These pin down the semantics that
// the JIT's traced versions will later be compared against, so they test behaviour (masking, caching,
// causality), not just that forward runs.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <tuple>

#include "models/bert.h"
#include "models/cnn.h"
#include "models/llama.h"
#include "models/mlp.h"

namespace zm = zenith::models;

namespace {

std::vector<int64_t> shape(const torch::Tensor& t) { return t.sizes().vec(); }

// Max-abs difference in the failure message makes a tolerance miss diagnosable at a glance.
::testing::AssertionResult close(const torch::Tensor& a, const torch::Tensor& b, double atol) {
  if (a.sizes() != b.sizes()) {
    return ::testing::AssertionFailure() << "shapes differ: " << a.sizes() << " vs " << b.sizes();
  }
  const double diff = (a - b).abs().max().item<double>();
  if (diff <= atol) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "max abs diff " << diff << " > " << atol;
}

torch::Tensor random_tokens(int64_t vocab, int64_t batch, int64_t len) {
  return torch::randint(vocab, {batch, len}, torch::kLong);
}

}  // namespace

// ---------------------------------------------------------------------------------------------- MLP

TEST(Mlp, OutputShape) {
  torch::manual_seed(0);
  torch::NoGradGuard no_grad;
  for (auto act : {zm::Activation::kGelu, zm::Activation::kRelu}) {
    zm::MlpConfig config = zm::MlpConfig::small();
    config.activation = act;
    zm::Mlp mlp(config);
    torch::Tensor x = torch::randn({5, config.in});
    EXPECT_EQ(shape(mlp->forward(x)), (std::vector<int64_t>{5, config.out}));
    // Leading dimensions pass through, as for torch::nn::Linear.
    EXPECT_EQ(shape(mlp->forward(torch::randn({2, 3, config.in}))), (std::vector<int64_t>{2, 3, config.out}));
  }
}

TEST(Mlp, ActivationMatters) {
  // Guards against the activation being silently ignored: ReLU and GELU nets with equal weights must
  // disagree.
  torch::manual_seed(0);
  torch::NoGradGuard no_grad;
  zm::MlpConfig config = zm::MlpConfig::small();
  config.activation = zm::Activation::kGelu;
  zm::Mlp gelu(config);
  config.activation = zm::Activation::kRelu;
  zm::Mlp relu(config);
  auto src = gelu->named_parameters();
  for (auto& p : relu->named_parameters()) p.value().copy_(src[p.key()]);
  torch::Tensor x = torch::randn({4, config.in});
  EXPECT_FALSE(torch::allclose(gelu->forward(x), relu->forward(x)));
}

TEST(Mlp, RejectsWrongFeatureSize) {
  torch::manual_seed(0);
  torch::NoGradGuard no_grad;
  zm::MlpConfig config = zm::MlpConfig::small();
  zm::Mlp mlp(config);
  EXPECT_THROW(mlp->forward(torch::randn({2, config.in + 1})), c10::Error);
}

// ---------------------------------------------------------------------------------------------- CNN

TEST(Cnn, OutputShape) {
  torch::manual_seed(0);
  torch::NoGradGuard no_grad;
  zm::CnnConfig config = zm::CnnConfig::small();
  zm::Cnn cnn(config);
  cnn->eval();
  torch::Tensor images = torch::randn({2, config.in_channels, config.image_size, config.image_size});
  EXPECT_EQ(shape(cnn->forward(images)), (std::vector<int64_t>{2, config.num_classes}));
  // Adaptive pooling: a different resolution gives the same logits shape.
  EXPECT_EQ(shape(cnn->forward(torch::randn({1, config.in_channels, 48, 40}))),
            (std::vector<int64_t>{1, config.num_classes}));
}

TEST(Cnn, EvalIsDeterministic) {
  torch::manual_seed(0);
  torch::NoGradGuard no_grad;
  zm::CnnConfig config = zm::CnnConfig::small();
  zm::Cnn cnn(config);
  torch::Tensor images = torch::randn({2, config.in_channels, config.image_size, config.image_size});
  // A train-mode pass first: it moves the running statistics, which eval must then use unchanged.
  cnn->train();
  cnn->forward(images);
  cnn->eval();
  torch::Tensor a = cnn->forward(images);
  torch::Tensor b = cnn->forward(images);
  EXPECT_TRUE(torch::equal(a, b));
  // Eval output of one image does not depend on the rest of the batch (batch statistics are unused).
  EXPECT_TRUE(close(cnn->forward(images.narrow(0, 0, 1)), a.narrow(0, 0, 1), 1e-5));
}

TEST(Cnn, BottleneckShapes) {
  torch::manual_seed(0);
  torch::NoGradGuard no_grad;
  // Identity shortcut: channels and resolution unchanged.
  zm::Bottleneck same(/*in_channels=*/32, /*width=*/8, /*expansion=*/4, /*stride=*/1);
  same->eval();
  torch::Tensor x = torch::randn({2, 32, 9, 9});
  EXPECT_EQ(shape(same->forward(x)), (std::vector<int64_t>{2, 32, 9, 9}));
  // Projected shortcut: more channels and half the resolution (rounded up).
  zm::Bottleneck down(/*in_channels=*/16, /*width=*/8, /*expansion=*/4, /*stride=*/2);
  down->eval();
  EXPECT_EQ(shape(down->forward(torch::randn({2, 16, 9, 9}))), (std::vector<int64_t>{2, 32, 5, 5}));
  // The block is residual and ends in ReLU, so its output is non-negative.
  EXPECT_GE(same->forward(x).min().item<float>(), 0.0f);
}

TEST(Cnn, ResNet50Config) {
  torch::manual_seed(0);
  // Only the config: the full model is for GPU benchmarks.
  zm::CnnConfig c = zm::CnnConfig::resnet50();
  EXPECT_EQ(c.layers, (std::vector<int64_t>{3, 4, 6, 3}));
  EXPECT_EQ(c.widths.back() * c.expansion, 2048);
  EXPECT_EQ(c.num_classes, 1000);
  EXPECT_EQ(c.image_size, 224);
}

TEST(Cnn, RejectsBadInput) {
  torch::manual_seed(0);
  torch::NoGradGuard no_grad;
  zm::CnnConfig config = zm::CnnConfig::small();
  zm::Cnn cnn(config);
  cnn->eval();
  EXPECT_THROW(cnn->forward(torch::randn({config.in_channels, 32, 32})), c10::Error);  // rank 3
  EXPECT_THROW(cnn->forward(torch::randn({1, config.in_channels + 1, 32, 32})), c10::Error);
  zm::Bottleneck block(16, 8, 4, 1);
  EXPECT_THROW(block->forward(torch::randn({1, 8, 8, 8})), c10::Error);
}

// --------------------------------------------------------------------------------------------- BERT

TEST(Bert, OutputShape) {
  torch::manual_seed(0);
  torch::NoGradGuard no_grad;
  zm::BertConfig config = zm::BertConfig::small();
  zm::Bert bert(config);
  bert->eval();
  torch::Tensor ids = random_tokens(config.vocab_size, 3, 11);
  torch::Tensor out = bert->forward(ids, torch::ones_like(ids));
  EXPECT_EQ(shape(out), (std::vector<int64_t>{3, 11, config.hidden_size}));
  EXPECT_TRUE(torch::isfinite(out).all().item<bool>());
}

TEST(Bert, PaddingInvariance) {
  torch::manual_seed(0);
  torch::NoGradGuard no_grad;
  zm::BertConfig config = zm::BertConfig::small();
  zm::Bert bert(config);
  bert->eval();
  const int64_t padded_len = 12;
  const std::vector<int64_t> lengths{7, 12, 1};
  torch::Tensor padded_ids = random_tokens(config.vocab_size, lengths.size(), padded_len);
  torch::Tensor mask = torch::zeros({static_cast<int64_t>(lengths.size()), padded_len}, torch::kLong);
  for (size_t b = 0; b < lengths.size(); ++b) mask[b].narrow(0, 0, lengths[b]).fill_(1);

  torch::Tensor padded_out = bert->forward(padded_ids, mask);
  for (size_t b = 0; b < lengths.size(); ++b) {
    const int64_t len = lengths[b];
    torch::Tensor ids = padded_ids.narrow(0, b, 1).narrow(1, 0, len);
    torch::Tensor alone = bert->forward(ids, torch::ones_like(ids));
    EXPECT_TRUE(close(padded_out.narrow(0, b, 1).narrow(1, 0, len), alone, 1e-5)) << "sequence " << b;
  }

  // The mask must actually be used: attending to the padding changes the real positions.
  torch::Tensor unmasked = bert->forward(padded_ids, torch::ones_like(padded_ids));
  EXPECT_FALSE(close(unmasked.narrow(0, 0, 1).narrow(1, 0, lengths[0]),
                     padded_out.narrow(0, 0, 1).narrow(1, 0, lengths[0]), 1e-3));
}

TEST(Bert, BaseConfig) {
  torch::manual_seed(0);
  zm::BertConfig c = zm::BertConfig::base();
  EXPECT_EQ(c.vocab_size, 30522);
  EXPECT_EQ(c.hidden_size, 768);
  EXPECT_EQ(c.num_layers, 12);
  EXPECT_EQ(c.num_heads, 12);
  EXPECT_EQ(c.intermediate_size, 3072);
  EXPECT_EQ(c.max_position_embeddings, 512);
  EXPECT_EQ(c.type_vocab_size, 2);
}

TEST(Bert, RejectsBadInput) {
  torch::manual_seed(0);
  torch::NoGradGuard no_grad;
  zm::BertConfig config = zm::BertConfig::small();
  zm::Bert bert(config);
  bert->eval();
  torch::Tensor ids = random_tokens(config.vocab_size, 2, 5);
  EXPECT_THROW(bert->forward(ids.flatten(), torch::ones({10}, torch::kLong)), c10::Error);  // rank 1
  EXPECT_THROW(bert->forward(ids, torch::ones({2, 4}, torch::kLong)), c10::Error);
  torch::Tensor too_long = random_tokens(config.vocab_size, 1, config.max_position_embeddings + 1);
  EXPECT_THROW(bert->forward(too_long, torch::ones_like(too_long)), c10::Error);
}

// -------------------------------------------------------------------------------------------- LLaMA

TEST(Llama, RMSNormHasUnitRms) {
  torch::manual_seed(0);
  torch::NoGradGuard no_grad;
  zm::RMSNorm norm(64, 1e-5);
  // Rows of very different scales: the norm must remove the scale of each row separately.
  torch::Tensor x = torch::randn({3, 5, 64}) * torch::tensor({0.5, 3.0, 40.0}).view({3, 1, 1});
  torch::Tensor y = norm->forward(x);
  torch::Tensor rms = y.pow(2).mean(-1).sqrt();
  EXPECT_TRUE(close(rms, torch::ones_like(rms), 1e-4));
  // Direction is preserved: y is a positive multiple of x.
  EXPECT_TRUE(close(torch::nn::functional::cosine_similarity(
                        x, y, torch::nn::functional::CosineSimilarityFuncOptions().dim(-1)),
                    torch::ones({3, 5}), 1e-5));
}

TEST(Llama, OutputAndCacheShapes) {
  torch::manual_seed(0);
  torch::NoGradGuard no_grad;
  zm::LlamaConfig config = zm::LlamaConfig::small();
  ASSERT_LT(config.num_kv_heads, config.num_heads);  // the small config must exercise GQA
  zm::Llama model(config);
  model->eval();
  const int64_t batch = 2, len = 6;
  auto [past_k, past_v] = zm::empty_cache(config, batch);
  EXPECT_EQ(shape(past_k),
            (std::vector<int64_t>{config.num_layers, batch, config.num_kv_heads, 0, config.head_dim()}));
  auto [logits, k, v] = model->forward(random_tokens(config.vocab_size, batch, len), past_k, past_v);
  EXPECT_EQ(shape(logits), (std::vector<int64_t>{batch, len, config.vocab_size}));
  const std::vector<int64_t> cache_shape{config.num_layers, batch, config.num_kv_heads, len,
                                         config.head_dim()};
  EXPECT_EQ(shape(k), cache_shape);
  EXPECT_EQ(shape(v), cache_shape);
}

TEST(Llama, IncrementalDecodingMatchesFullSequence) {
  torch::manual_seed(0);
  torch::NoGradGuard no_grad;
  zm::LlamaConfig config = zm::LlamaConfig::small();
  zm::Llama model(config);
  model->eval();
  const int64_t batch = 2, len = 10, prefix = len - 3;
  torch::Tensor tokens = random_tokens(config.vocab_size, batch, len);
  auto [empty_k, empty_v] = zm::empty_cache(config, batch);

  auto [full_logits, full_k, full_v] = model->forward(tokens, empty_k, empty_v);

  auto [logits, k, v] = model->forward(tokens.narrow(1, 0, prefix), empty_k, empty_v);
  EXPECT_TRUE(close(logits, full_logits.narrow(1, 0, prefix), 1e-4));
  for (int64_t t = prefix; t < len; ++t) {
    std::tie(logits, k, v) = model->forward(tokens.narrow(1, t, 1), k, v);
    EXPECT_EQ(shape(logits), (std::vector<int64_t>{batch, 1, config.vocab_size}));
    EXPECT_EQ(shape(k), (std::vector<int64_t>{config.num_layers, batch, config.num_kv_heads, t + 1,
                                              config.head_dim()}));
    EXPECT_EQ(shape(v), shape(k));
    EXPECT_TRUE(close(logits, full_logits.narrow(1, t, 1), 1e-4)) << "position " << t;
  }
  // The cache built step by step holds the same keys and values as the one built in one go.
  EXPECT_TRUE(close(k, full_k, 1e-4));
  EXPECT_TRUE(close(v, full_v, 1e-4));
}

TEST(Llama, ChunkWithNonEmptyCacheMatchesFullSequence) {
  // T > 1 new tokens on top of a non-empty cache: the case where the causal mask must be offset by
  // the cache length.
  torch::manual_seed(0);
  torch::NoGradGuard no_grad;
  zm::LlamaConfig config = zm::LlamaConfig::small();
  zm::Llama model(config);
  model->eval();
  const int64_t batch = 1, len = 12, prefix = 5;
  torch::Tensor tokens = random_tokens(config.vocab_size, batch, len);
  auto [empty_k, empty_v] = zm::empty_cache(config, batch);
  auto [full_logits, full_k, full_v] = model->forward(tokens, empty_k, empty_v);

  auto [l1, k1, v1] = model->forward(tokens.narrow(1, 0, prefix), empty_k, empty_v);
  auto [l2, k2, v2] = model->forward(tokens.narrow(1, prefix, len - prefix), k1, v1);
  EXPECT_TRUE(close(l2, full_logits.narrow(1, prefix, len - prefix), 1e-4));
  EXPECT_EQ(shape(k2), shape(full_k));
  EXPECT_TRUE(close(v2, full_v, 1e-4));
}

TEST(Llama, Causality) {
  torch::manual_seed(0);
  torch::NoGradGuard no_grad;
  zm::LlamaConfig config = zm::LlamaConfig::small();
  zm::Llama model(config);
  model->eval();
  const int64_t batch = 2, len = 8, changed = 5;
  torch::Tensor tokens = random_tokens(config.vocab_size, batch, len);
  torch::Tensor altered = tokens.clone();
  altered.select(1, changed).add_(1).remainder_(config.vocab_size);
  auto [empty_k, empty_v] = zm::empty_cache(config, batch);

  torch::Tensor a = std::get<0>(model->forward(tokens, empty_k, empty_v));
  torch::Tensor b = std::get<0>(model->forward(altered, empty_k, empty_v));
  EXPECT_TRUE(close(a.narrow(1, 0, changed), b.narrow(1, 0, changed), 1e-6));
  // ...while the changed position and those after it do see the change.
  for (int64_t t = changed; t < len; ++t) {
    EXPECT_FALSE(close(a.narrow(1, t, 1), b.narrow(1, t, 1), 1e-4)) << "position " << t;
  }
}

TEST(Llama, RotaryPositionsStartAtCacheLength) {
  torch::manual_seed(0);
  // The same token fed at position 0 and, after a one-token cache, at position 1. In layer 0 the key
  // before rotation is identical (it depends on the token only), so the cached keys must differ by a
  // pure rotation: different values, same norm per head. Guards against positions being counted from
  // the chunk instead of from the cache.
  torch::manual_seed(0);
  torch::NoGradGuard no_grad;
  zm::LlamaConfig config = zm::LlamaConfig::small();
  zm::Llama model(config);
  model->eval();
  torch::Tensor token = random_tokens(config.vocab_size, 1, 1);
  auto [empty_k, empty_v] = zm::empty_cache(config, 1);
  auto [l0, k0, v0] = model->forward(token, empty_k, empty_v);
  auto [l1, k1, v1] = model->forward(token, k0, v0);
  torch::Tensor key_at0 = k1.select(0, 0).select(2, 0);  // [B, kv_heads, head_dim]
  torch::Tensor key_at1 = k1.select(0, 0).select(2, 1);
  EXPECT_TRUE(close(key_at0, k0.select(0, 0).select(2, 0), 0.0));  // the cache is passed through untouched
  EXPECT_FALSE(close(key_at1, key_at0, 1e-3));
  EXPECT_TRUE(close(key_at1.norm(2, -1), key_at0.norm(2, -1), 1e-5));
  // Values are not rotated, so in layer 0 they agree exactly.
  EXPECT_TRUE(close(v1.select(0, 0).select(2, 1), v1.select(0, 0).select(2, 0), 1e-6));
}

TEST(Llama, TinyLlamaConfig) {
  torch::manual_seed(0);
  zm::LlamaConfig c = zm::LlamaConfig::tinyllama();
  EXPECT_EQ(c.vocab_size, 32000);
  EXPECT_EQ(c.hidden_size, 2048);
  EXPECT_EQ(c.num_layers, 22);
  EXPECT_EQ(c.num_heads, 32);
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_EQ(c.intermediate_size, 5632);
  EXPECT_EQ(c.head_dim(), 64);
  EXPECT_DOUBLE_EQ(c.rope_theta, 10000.0);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.max_position_embeddings, 2048);
}

TEST(Llama, RejectsBadInput) {
  torch::manual_seed(0);
  torch::NoGradGuard no_grad;
  zm::LlamaConfig config = zm::LlamaConfig::small();
  zm::Llama model(config);
  model->eval();
  auto [k, v] = zm::empty_cache(config, 2);
  torch::Tensor tokens = random_tokens(config.vocab_size, 2, 4);
  EXPECT_THROW(model->forward(tokens.flatten(), k, v), c10::Error);                  // tokens of rank 1
  EXPECT_THROW(model->forward(tokens, k.select(0, 0), v.select(0, 0)), c10::Error);  // cache of rank 4
  EXPECT_THROW(model->forward(tokens, k, v.narrow(0, 0, 1)), c10::Error);            // k and v disagree
  auto [k3, v3] = zm::empty_cache(config, 3);
  EXPECT_THROW(model->forward(tokens, k3, v3), c10::Error);  // batch mismatch
  torch::Tensor too_long = random_tokens(config.vocab_size, 2, config.max_position_embeddings + 1);
  EXPECT_THROW(model->forward(too_long, k, v), c10::Error);
  zm::LlamaConfig uneven = zm::LlamaConfig::small();
  uneven.num_kv_heads = 3;  // 4 query heads cannot be split evenly over 3 KV heads
  EXPECT_THROW(zm::Llama{uneven}, c10::Error);
}
