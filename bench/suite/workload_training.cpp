// One training step (forward, loss, backward, AdamW step) of the CNN and of a 6-layer BERT-base
// encoder (about 43M parameters) with a masked-LM style loss over the tied token embedding;
// float32, or bfloat16 autocast. Eager only: Zenith runs a call that needs gradients eagerly until
// training through a compiled backward lands, so a "zenith" row would time eager again.
#include <torch/torch.h>

#include <cmath>
#include <optional>

#include "autocast_guard.h"
#include "fixed_shape.h"
#include "models/bert.h"
#include "models/cnn.h"
#include "timing.h"
#include "workloads.h"

namespace zenith::bench {

namespace {

struct Trainee {
  std::shared_ptr<torch::nn::Module> module;
  std::function<at::Tensor()> loss;  // forward and loss over fixed inputs
};

Trainee cnn(const Context& context, const CaseSpec& spec) {
  using zenith::models::CnnConfig;
  const auto config = spec.text("config") == "resnet50" ? CnnConfig::resnet50() : CnnConfig::small();
  zenith::models::Cnn model(config);
  model->to(context.device);
  const auto batch = spec.integer("batch"), image = spec.integer("image");
  auto images = torch::randn({batch, config.in_channels, image, image}, torch::TensorOptions().device(context.device));
  auto labels = torch::randint(config.num_classes, {batch}, torch::TensorOptions().dtype(torch::kLong).device(context.device));
  return {model.ptr(), [=]() mutable { return torch::cross_entropy_loss(model->forward(images), labels); }};
}

Trainee transformer6(const Context& context, const CaseSpec& spec) {
  using zenith::models::BertConfig;
  auto config = spec.text("config") == "base" ? BertConfig::base() : BertConfig::small();
  config.num_layers = 6;
  zenith::models::Bert model(config);
  model->to(context.device);
  const auto batch = spec.integer("batch"), seq = spec.integer("seq");
  const auto longs = torch::TensorOptions().dtype(torch::kLong).device(context.device);
  auto ids = torch::randint(config.vocab_size, {batch, seq}, longs);
  auto mask = torch::ones({batch, seq}, longs);
  auto labels = torch::randint(config.vocab_size, {batch * seq}, longs);
  return {model.ptr(), [=]() mutable {
            auto hidden = model->forward(ids, mask);
            auto logits = torch::matmul(hidden, model->embeddings->word_embeddings->weight.t());
            return torch::cross_entropy_loss(logits.view({batch * seq, config.vocab_size}), labels);
          }};
}

}  // namespace

std::vector<Result> run_training(const Context& context, const CaseSpec& spec) {
  Result r = named_result(spec, "eager (training)");
  r.extra["note"] = "eager only: Zenith does not compile training yet (it runs such calls eagerly)";
  try {
    const auto kind = spec.text("model");
    Trainee t = kind == "cnn" ? cnn(context, spec) : transformer6(context, spec);
    t.module->train();
    std::int64_t parameters = 0, embeddings = 0;
    for (const auto& p : t.module->named_parameters(true)) {
      parameters += p.value().numel();
      if (p.key().find("embeddings.") == 0 && p.value().dim() == 2) embeddings += p.value().numel();
    }
    r.extra["parameters"] = parameters;
    // The "about 43M" counts the six layers; the token embedding table adds 23M more.
    r.extra["parameters_without_embeddings"] = parameters - embeddings;
    torch::optim::AdamW optimizer(t.module->parameters(), torch::optim::AdamWOptions(1e-4));
    const bool mixed = spec.dtype() != c10::ScalarType::Float;
    double loss = 0;
    auto step = [&] {
      optimizer.zero_grad();
      at::Tensor value;
      {
        std::optional<AutocastGuard> autocast;
        if (mixed) autocast.emplace(context.device.type(), spec.dtype());
        value = t.loss();
      }
      value.backward();
      optimizer.step();
      loss = value.item<double>();
    };
    const PeakMemory memory(context.device);
    r.first_call_ms = wall_ms(context.device, step);
    for (int i = 1; i < std::max(3, context.warmup_calls()); ++i) step();
    const auto samples = time_calls(context.device, step, context.seconds_per_mode, context.smoke ? 1 : 5, 50);
    r.median_ms = samples.median_ms;
    r.p90_ms = samples.p90_ms;
    r.reps = samples.reps;
    r.peak_mb = memory.extra_mb();
    r.extra["steps_per_s"] = 1000.0 / samples.median_ms;
    r.extra["last_loss"] = loss;
    if (!std::isfinite(loss)) r.fail("the loss is not finite: " + std::to_string(loss));
  } catch (const std::exception& error) {
    r.fail(error_message(error));
  }
  return {r};
}

}  // namespace zenith::bench
